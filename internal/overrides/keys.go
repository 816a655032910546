package overrides

import (
	"cmp"

	"github.com/heartbeatd/heartbeatd/internal/config"
)

// keyspace names the per-device timeouts' keys; no other package reads or writes them.
type keyspace struct{ prefix string }

func newKeyspace(prefix string) keyspace {
	return keyspace{prefix: cmp.Or(prefix, config.DefaultKeyPrefix)}
}

// overrides is the HASH device → its per-device timeout type "<type>@<timeout>".
func (k keyspace) overrides() string { return k.prefix + ":overrides" }

// version is the counter bumped on every change of overrides, which every replica watches.
func (k keyspace) version() string { return k.prefix + ":overrides:version" }
