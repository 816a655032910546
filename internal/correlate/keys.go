package correlate

import (
	"cmp"

	"github.com/heartbeatd/heartbeatd/internal/config"
)

// keyspace names the correlator's Redis keys; no other package reads or writes them. A group is
// "<by>:<value>"; its keys share the group as hash tag, so one group's reads and scripts go to one node
// on Redis Cluster.
type keyspace struct{ prefix string }

func newKeyspace(prefix string) keyspace {
	return keyspace{prefix: cmp.Or(prefix, config.DefaultKeyPrefix)}
}

// correlated is the ZSET device → ms of its interruption, of one group: the last window's, and every
// member's since its outage began.
func (k keyspace) correlated(group string) string { return k.prefix + ":corr:{" + group + "}" }

// groups is the ZSET group → ms of its last interruption: the groups the correlator looks at.
func (k keyspace) groups() string { return k.prefix + ":corr:groups" }

// outage is the HASH of a group's open outage: id, view (its JSON), announced (0/1), announcing (the lease
// end, ms, of the one caller announcing it).
func (k keyspace) outage(group string) string { return k.prefix + ":outage:{" + group + "}" }

// open is the HASH outage id → its JSON view, for the API; recent the LIST of the views of the last
// ended ones.
func (k keyspace) open() string   { return k.prefix + ":outages:open" }
func (k keyspace) recent() string { return k.prefix + ":outages:recent" }

// lease is the lease of the one replica that looks at the groups on a tick (ends outages).
func (k keyspace) lease() string { return k.prefix + ":correlator" }
