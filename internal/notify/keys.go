package notify

import (
	"cmp"

	"github.com/heartbeatd/heartbeatd/internal/config"
)

// keyspace names the notifier's Redis keys; no other package reads or writes them (docs/concepts.md's key
// table states their lifetimes). Every key of one receiver shares the receiver's name as hash tag, so
// its scripts run on one node of a Redis Cluster.
type keyspace struct{ prefix string }

func newKeyspace(prefix string) keyspace {
	return keyspace{prefix: cmp.Or(prefix, config.DefaultKeyPrefix)}
}

func (k keyspace) base(receiver string) string { return k.prefix + ":notify:{" + receiver + "}" }

// queue is the LIST of a device's notifications waiting for a retry, oldest first: a device's order is
// kept by sending its new notifications behind it.
func (k keyspace) queue(receiver, device string) string { return k.base(receiver) + ":q:" + device }

// due is the ZSET device → ms of the next attempt of its queue's head (a lease while one is in flight).
func (k keyspace) due(receiver string) string { return k.base(receiver) + ":due" }

// open is the HASH device → the incident this receiver was told of: "<incident id>|<last seen ms>|<kinds sent>".
func (k keyspace) open(receiver string) string { return k.base(receiver) + ":open" }

// dead is the LIST of dead-lettered notifications with the receiver's answer, newest first, capped.
func (k keyspace) dead(receiver string) string { return k.base(receiver) + ":dead" }

// fold is the HASH kind → count of the notifications folded into the next summary (plus "_total" and
// "_since"); sample the LIST of their last devices; foldLease the lease of the one process sending it.
func (k keyspace) fold(receiver string) string      { return k.base(receiver) + ":fold" }
func (k keyspace) sample(receiver string) string    { return k.base(receiver) + ":fold:sample" }
func (k keyspace) foldLease(receiver string) string { return k.base(receiver) + ":fold:lease" }
