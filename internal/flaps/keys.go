package flaps

import (
	"cmp"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/slotlayout"
)

// keyspace names the flap histories' keys; no other package reads or writes them.
type keyspace struct{ prefix string }

func newKeyspace(prefix string) keyspace {
	return keyspace{prefix: cmp.Or(prefix, config.DefaultKeyPrefix)}
}

// flaps is the HASH device → the times (unix ms, comma-separated, oldest first) of its last
// interruptions, for the devices of slot of types with flapping detection (docs/events.md). It shares
// the slot's hash tag with internal/deadline's keys of the slot, {<slot>}, though no script reads both.
func (k keyspace) flaps(slot int) string { return slotlayout.SlotKey(k.prefix, slot, "flaps") }
