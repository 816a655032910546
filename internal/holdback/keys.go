package holdback

import (
	"cmp"

	"github.com/heartbeatd/heartbeatd/internal/config"
)

// keyspace names the tracker's Redis keys; no other package reads or writes them.
type keyspace struct{ prefix string }

func newKeyspace(prefix string) keyspace {
	return keyspace{prefix: cmp.Or(prefix, config.DefaultKeyPrefix)}
}

// windows is the HASH replica → JSON of its blind windows, shares and client ids (window.go), read by
// every replica's tracker.
func (k keyspace) windows() string { return k.prefix + ":windows" }

// health is the HASH replica → blind windows in the 0.1.0 form (legacy.go), kept so replicas of both
// versions honour each other's windows during a rolling upgrade.
func (k keyspace) health() string { return k.prefix + ":health" }

// alive is the key every replica refreshes while it runs, so a restart after a full outage is noticed.
func (k keyspace) alive() string { return k.prefix + ":alive" }
