// Package replicaset stores what slot ownership (internal/scan) keeps in Redis: the replica set, where
// each replica marks itself alive, and the lease (internal/lease) each replica holds on each slot it
// wins. It owns those keys (keys.go); internal/scan calls its methods on the Set the deadline store
// holds (deadline.Store.Replicas), and it imports no other storage package.
package replicaset
