// Package typememory is a deadline store's memory of the types recorded for its devices, and the
// fleet-wide retyped log that keeps the replicas' memories true.
//
// A signal without a type (the common MQTT heartbeat) is timed by the type recorded for its device, in
// the low bits of its deadline score. Reading that score costs a round trip and ≈ 0.5 µs of Redis per
// signal, more than the write itself in a periodic fleet, so each store remembers the types it read and
// wrote (Memory): an untyped signal of a remembered device is written as if it named its type.
//
// Another replica may change a device's type (a typed signal, a delete). A store that changes the type of
// a device, or deletes one, appends the device to the retyped log (QueueRetyped), and every store checks
// the log's counter in each refresh round trip (QueueCheck), forgetting the devices named since it last
// looked (ApplyRetyped): a change reaches the other replicas within one of their batches. Changes the log
// cannot tell (Redis lost its data, a replica of an older version) are bounded by Refresh, after which a
// device's type is read again.
//
// The package owns the log's keys (keys.go); internal/deadline holds one Memory per store and calls it
// on its signal path. It imports no other package of the repository's storage.
package typememory
