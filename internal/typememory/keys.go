package typememory

import (
	"cmp"

	"github.com/heartbeatd/heartbeatd/internal/config"
)

// keyspace names the retyped log's keys; no other package reads or writes them.
type keyspace struct{ prefix string }

func newKeyspace(prefix string) keyspace {
	return keyspace{prefix: cmp.Or(prefix, config.DefaultKeyPrefix)}
}

// retyped is the LIST of devices whose type changed or that were deleted, newest first, capped at
// retypedLogSize entries, and retypedCount the number of entries ever added to it. Both share a hash
// tag, so a script updates them together on Redis Cluster.
func (k keyspace) retyped() string      { return k.prefix + ":{retyped}" }
func (k keyspace) retypedCount() string { return k.prefix + ":{retyped}:count" }
