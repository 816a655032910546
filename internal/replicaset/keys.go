package replicaset

import (
	"cmp"
	"strconv"

	"github.com/heartbeatd/heartbeatd/internal/config"
)

// keyspace names the replica set's and the slot leases' keys; no other package reads or writes them.
type keyspace struct{ prefix string }

func newKeyspace(prefix string) keyspace {
	return keyspace{prefix: cmp.Or(prefix, config.DefaultKeyPrefix)}
}

// owner is the lease key (internal/lease) of slot held by the replica scanning it.
func (k keyspace) owner(slot int) string { return k.prefix + ":owner:{" + strconv.Itoa(slot) + "}" }

// replicas is the ZSET replica id → last heartbeat (ms) of live replicas.
func (k keyspace) replicas() string { return k.prefix + ":replicas" }
