package holdback

import (
	"fmt"
	"time"

	"go.uber.org/zap"
)

// redisDown opens (or keeps open) this replica's Redis window from the last time Redis took its windows:
// while Redis refuses writes the ingest chain stores no signal, so a deadline that passes meanwhile says
// nothing about the device. The hold applies at once, locally, because the scanners may reach Redis
// again before the next tick shares it; the next successful tick closes the window and starts its grace,
// in which the backlog the sources kept unacknowledged is stored.
func (h *Tracker) redisDown(now time.Time) {
	h.mu.Lock()
	h.openRedisLocked(now, now, redisUnreachable)
	h.mu.Unlock()
	h.report(now)
}

// redisUnreachable is the reason of the window redisDown opens.
const redisUnreachable = "redis unreachable"

// slowRoundTrip is how long a tick's round trip may take before its wait counts as Redis unreachable:
// the ingest chain's default for a stuck write.
const slowRoundTrip = time.Second

// writesRefusedLocked keeps the Redis window open while WriteFailure reports refused deadline writes,
// from their start at the latest: the refused batch held signals received before its first attempt. A
// span of trouble that ended unseen (WriteTrouble) becomes the window it would have been. It reports
// whether writes are refused.
func (h *Tracker) writesRefusedLocked(now time.Time) bool {
	var since time.Time
	if h.opts.WriteFailure != nil {
		since = h.opts.WriteFailure()
	}
	// Read after WriteFailure: a trouble ends (and is recorded) before the failure is cleared.
	if h.opts.WriteTrouble != nil {
		if from, to := h.opts.WriteTrouble(); to.After(h.troubleTo) {
			h.troubleTo = to
			if i := h.find(windowRedis); i < 0 || !h.local[i].live(now) {
				h.log.Warn("deadline writes were refused or unanswered, unseen until now: holding detection back over that span",
					zap.Time("from", from), zap.Time("to", to))
			}
			h.recordRedisLocked(now, from, to, redisRefusedWrites)
		}
	}
	if since.IsZero() {
		return false
	}
	h.openRedisLocked(now, since, redisRefusedWrites)
	return true
}

// redisRefusedWrites is the reason of the window writesRefusedLocked opens.
const redisRefusedWrites = "redis refused deadline writes"

// openRedisLocked opens (or keeps open) this replica's Redis window from since or the last time Redis
// took its windows, whichever is earlier: nothing said after that share is known to be stored.
func (h *Tracker) openRedisLocked(now, since time.Time, reason string) {
	h.openLocked(now, windowRedis, causeRedis, ScopeAll, earliestSet(h.lastShared, since), reason, false)
}

// recordRedisLocked is openRedisLocked for a span already over at to.
func (h *Tracker) recordRedisLocked(now, since, to time.Time, reason string) {
	h.recordLocked(now, Window{ID: windowRedis, Cause: causeRedis, Scope: ScopeAll, From: earliestSet(h.lastShared, since),
		To: to, Reason: reason})
}

// checkClockLocked follows ClockCheck: since when it fails, and why.

// lostWritesLocked notices a Redis that came back without writes it had acknowledged: a restart from an
// append-only file synced once a second, or from an older snapshot. Every tick writes this replica's
// entry (stamped with the tick's time) and reads it first; an entry older than the last one Redis
// acknowledged means everything written since may be gone, deadlines moved by the signals of that span
// among it. The span becomes a window from the surviving entry's stamp, so no deadline it may have
// rolled back is claimed before its device had its own timeout of visible time after it. An entry gone
// altogether proves nothing: another replica removes a long-silent one, and a loss of everything is
// the store's data-loss check, with no deadline left to be claimed falsely.
func (h *Tracker) lostWritesLocked(now time.Time, before []any) {
	if len(before) != 1 {
		return
	}
	v, _ := before[0].(string)
	prev, ok := decodeEntry(h.opts.ReplicaID, v)
	if !ok || h.lastShared.IsZero() || prev.at.UnixMilli() >= h.lastShared.UnixMilli() {
		return
	}
	h.log.Warn("Redis came back without writes it had acknowledged: holding detection back over the span they may have moved",
		zap.Time("from", prev.at), zap.Time("last_acknowledged", h.lastShared))
	h.recordLocked(now, Window{ID: windowRedisLost, Cause: causeRedis, Scope: ScopeAll, From: prev.at, To: now,
		Reason: fmt.Sprintf("redis lost the writes acknowledged since %s", prev.at.UTC().Format(time.RFC3339Nano))})
}

// windowRedisLost is the id of the window lostWritesLocked records.
const windowRedisLost = "redis-lost"
