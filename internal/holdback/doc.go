// Package holdback keeps heartbeatd from reporting a device as silent when it was heartbeatd that could
// not hear it. Every such reason is a blind window (window.go): a source of any replica disconnected,
// lagging or rebalancing, a replica that died with its share of the signals (member.go), heartbeatd
// down or stalled (stall.go), Redis refusing writes (redis.go). Each replica shares its windows in Redis
// (keys.go; no other package touches those keys) and every scanner honours all of them through the
// Tracker's watermark: after a window, each device waits its own timeout of visible time, and a window
// in which the broker kept every signal needs no grace (docs/concepts.md, "Blind windows and
// hold-back").
//
// The package also holds the shared clock (clock.go): every replica measures its offset from Redis TIME,
// so windows, deadlines and leases are judged on one clock, and a replica too far off stops scanning.
//
// Files: tracker.go (options, start, the tick, the watermark and the metrics), opening.go (opening and closing
// windows), status.go (what /readyz, /v1/stats and the log show), member.go (replicas that read a share
// alone), redis.go (Redis refusing or not answering writes), duplicate.go (a second process with this
// replica's identity), legacy.go (the 0.1.0 wire form), degraded.go (marking events while detection
// runs past max_hold_back).
package holdback
