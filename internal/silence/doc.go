// Package silence keeps the maintenance windows operators set (docs/http-api.md): silences by device, by
// type or by matchers (internal/matcher), for a span or recurring inside named time intervals
// (docs/schedules.md), stored in one Redis hash every replica shares and indexed in memory, so the alarm
// loop's per-claim check (internal/alarm's Handler, through SilencedUntil) costs no round trip.
//
// A silence defers a device's events, not its detection: the alarm loop reschedules each incident a
// silence covers to the silence's end. Ending a silence early hands those incidents back through
// internal/deadline, which owns the alarms set (Store.RearmDevice, RearmType). The silenced and unsilenced
// events go out once across replicas (ends.go); after Redis lost its data, a replica writes back the
// silences it knew (Silences.Load).
//
// The package owns the silences hash and the guards of their announced ends (keys.go), and nothing else
// in Redis.
package silence
