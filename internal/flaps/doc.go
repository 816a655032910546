// Package flaps stores the devices' interruption histories for flapping detection (docs/events.md): the
// times of each device's last interruptions, in one hash per slot, of the devices of types with
// flapping detection. It owns those keys (keys.go).
//
// The alarm loop reads and records the histories (History, Record), the sweeper drops those older than
// every flapping window (Prune), and internal/deadline's deletes drop a deleted device's (QueueDelete),
// on the Histories the deadline store holds (Store.Flaps). The package imports no other storage
// package.
package flaps
