// Package deadline is the Redis side of detection: it stores every device's deadline in per-slot sorted
// sets, claims the devices whose deadline passed, and stores what the alarm loop did with them. It knows
// nothing of MQTT or Kafka. Policy is decided elsewhere (internal/config resolves it, internal/alarm
// decides), but this package applies it: a type's timeout, repeat interval, expected times and warning
// come in through Options' callbacks, a device's own timeout is resolved here (owntimeout.go), and a
// fresh claim is committed as the alarm loop's usual decision (commit, below).
//
// It is storage only, as asynq's rdb is to asynq: the keys of the slots (keys.go), each script beside the
// one method that runs it, the state codec (state.go), and typed operations on them, including what the
// children of gateways wait for (wake.go, parents.go), registrations and own timeouts (register.go)
// and reported causes (cause.go). Type names become the indexes folded into the scores through
// internal/typeindex, on the hash this package names (Keyspace.Types), and the reclaim of unused indexes
// scans the slots here (typereclaim.go). The key families beside the slots that a store writes with its
// own are small packages of their own, which this package imports and no script here reads: the slot
// layout and its data-loss detection in internal/slotlayout (Layout, DataLost), the parent links in
// internal/parents (Store.Links), the registry's entries in internal/registry (Store.Registry), the
// per-device timeouts in internal/overrides, the flapping histories in internal/flaps (Store.Flaps), and
// the remembered types with the retyped log in internal/typememory. The background loops that drive it
// live apart and call its exported methods: the scanner and slot ownership in internal/scan (Claim, Peek,
// RefreshLayout, and the replica set and slot leases of internal/replicaset through Store.Replicas), the
// sweeper in internal/sweep (SweepDormant, WakeParked, ForgetSilent,
// …). They import this package, never the other way round. The other packages' keys are their own
// (internal/holdback, internal/correlate, internal/silence).
//
// Read this first: the other files use these words in this sense only.
//
//   - slot: one of 2^n shards of the fleet, Slot(device) = crc32(device) mod slots. The keys of a slot
//     share one hash tag, so a script over them runs on Redis Cluster too (keys.go; doubling: layout.go).
//   - deadline: when a device's silence becomes an incident: its last signal plus its type's timeout.
//     The slot's deadlines set scores each device deadline_ms × MaxTypes + type index, so a refresh is
//     one ZADD GT and a claim learns the type for free (store.go, types.go).
//   - incident: one interruption of one device, from the deadline that passed until its recovery is
//     reported; its deadline identifies it. Its State is kept in the slot's state hash (state.go).
//   - act: what the alarm loop does with an incident next: publish `interrupted`, a repeat or
//     `recovered`, or wait. The slot's alarms set scores each incident with when to act next.
//   - dormant: an incident with no act until the device signals again (acknowledged, exhausted, no
//     repeats); its alarm entry is scored from dormantAfter up, so it never comes due.
//   - claim: handing due work to the alarm loop, per slot a few atomic script steps sent together
//     (claimsteps.go): devices whose deadline passed (fresh claims) and alarm entries whose act came
//     due. A Claim is one device.
//   - lease: a claim's alarm entry is scored now + lease. If the process dies before acknowledging it,
//     the incident comes due again and its events go out again with the same ids (at-least-once).
//   - commit: a plain fresh claim (no open incident) is stored by the claim itself as the alarm loop
//     almost always leaves it: `interrupted` sent, the next act one repeat interval away, or dormant.
//     That is alarm.Decide's usual outcome stored ahead of time; Decide alone says whether it stands
//     (alarm.Decision.Committed), and the alarm loop acknowledges the claims where it does not. A
//     waiting child is committed the same way, as `suppressed`, by its down parent's wake (wake.go).
//   - record: the in-flight record of one claim (or wake) call's committed claims in one slot: their
//     list in the slot's in-flight hash, leased by a member of its alarms set. When its lease runs out,
//     the claims still as committed are handed out again; releasing it is their whole acknowledgement.
//   - settle: finish a wake-up (ack.go): apply the acks of the claims not left as committed, then
//     release the records. Every ack is guarded by the claimed incident's deadline, so it never clobbers
//     a newer incident, an operator's ack, or a signal that arrived meanwhile.
//   - parked: a claim whose events Kafka refused for their content too often (Park), kept in the slot's
//     dead set with its incident's state and no act, until Requeue makes it due again (dead.go).
//   - sweep: each slot's owner looking over the slot's dormant incidents now and then for a device back
//     in the deadlines set, the safety net for a recovery probe that never ran (dormant.go, internal/sweep).
//
// The current figures these choices give are in docs/benchmarks.md; the same-run A/B measurements that
// decided them are in that page's history (git log -p docs/benchmarks.md).
package deadline
