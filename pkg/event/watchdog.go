package event

import (
	"strconv"
	"time"
)

// Watchdog is published by every replica every detection.watchdog_every through the same publisher as
// device events (docs/events.md), so a consumer that stops receiving it knows the pipeline stopped end to end:
// the Prometheus Watchdog pattern. Its device_id and key are the replica's id; it has no type, deadline
// or last_seen.
const Watchdog Kind = "watchdog"

// WatchdogID returns watchdog/<replica>/<tick Unix ms>: one id per replica and tick.
func WatchdogID(replica string, tick time.Time) string {
	return "watchdog/" + replica + "/" + strconv.FormatInt(normalizeTime(tick).UnixMilli(), 10)
}

// NewWatchdog builds replica's watchdog event for the tick at.
func NewWatchdog(replica string, at time.Time) Event {
	at = normalizeTime(at)
	return Event{Schema: Schema, ID: WatchdogID(replica, at), Kind: Watchdog, DeviceID: replica, At: at}
}
