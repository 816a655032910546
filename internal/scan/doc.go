// Package scan runs the loops that find due work in the deadline store's slots: slot ownership
// (ownership.go), which shares the slots among the live replicas by rendezvous hashing and holds a lease
// on each one a replica wins, and the scanner (scanner.go), which claims the due devices of the slots
// this replica owns and hands them to the alarm loop, sleeping until the earliest known due time
// (schedule.go).
//
// It keeps no keys and runs no script of its own: the claim and the peek are internal/deadline's typed
// operations (deadline.Store's Claim, Peek), the replica set and the slot leases internal/replicaset's
// (the Set the store holds, deadline.Store.Replicas: Join, LeaseSlots, Leave).
// Correctness never rests on the leases (a claim is atomic); they only keep two replicas from scanning
// one slot at once.
package scan
