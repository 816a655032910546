package holdback

import (
	"fmt"
	"iter"
	"math"
	"slices"
	"time"

	"go.uber.org/zap"
)

// degraded reports whether detection runs although it cannot trust silence for some configured type
// (DegradedFor), or for any device when no types are given.
func (h *Tracker) degraded() bool {
	return atNowLocked(h, func(now time.Time) bool { return h.degradedLocked(now, h.longestTimeout()) })
}

// DegradedFor reports, by device type, whether detection runs at now although it cannot trust the
// silence of such devices: a window past MaxHoldBack still blinds them, or this replica's clock has been
// off that long. DegradedSink marks their events then. A type's devices are judged by the type's
// timeout (timeoutOf), a device's own timeout aside.
func (h *Tracker) DegradedFor(timeoutOf func(deviceType string) time.Duration) func() func(deviceType string) bool {
	return func() func(string) bool {
		now := h.opts.Now()
		h.mu.Lock()
		clock := !h.clockBad.IsZero() && !h.clockHoldsLocked(now)
		var expired []Window
		for w := range h.liveLocked(now) {
			if w.expired(now, h.opts.MaxHoldBack) {
				expired = append(expired, w)
			}
		}
		h.mu.Unlock()
		return func(typ string) bool {
			timeout := timeoutOf(typ)
			return clock || slices.ContainsFunc(expired, func(w Window) bool { return w.blinds(now, timeout) })
		}
	}
}

func (h *Tracker) degradedLocked(now time.Time, timeout time.Duration) bool {
	for w := range h.liveLocked(now) {
		if w.expired(now, h.opts.MaxHoldBack) && w.blinds(now, timeout) {
			return true
		}
	}
	return !h.clockBad.IsZero() && !h.clockHoldsLocked(now)
}

// longestTimeout is the longest configured timeout, or no bound without Timeouts (every window's grace).
func (h *Tracker) longestTimeout() time.Duration {
	if h.opts.Timeouts == nil {
		return math.MaxInt64
	}
	var longest time.Duration
	for _, t := range h.opts.Timeouts() {
		longest = max(longest, t)
	}
	return longest
}

// liveLocked yields every replica's windows that are open or in their grace at now.
func (h *Tracker) liveLocked(now time.Time) iter.Seq[Window] {
	return func(yield func(Window) bool) {
		for _, ws := range [][]Window{h.local, h.remote} {
			for _, w := range ws {
				if w.live(now) && !yield(w) {
					return
				}
			}
		}
	}
}

// heldFor is how long the oldest live window has lasted (heartbeatd_hold_back_seconds).
func (h *Tracker) heldFor() time.Duration {
	return atNowLocked(h, func(now time.Time) time.Duration {
		var d time.Duration
		for w := range h.liveLocked(now) {
			d = max(d, now.Sub(w.Opened))
		}
		return d
	})
}

// Status is the current hold-back state.
func (h *Tracker) Status() Status { return atNowLocked(h, h.statusLocked) }

func (h *Tracker) statusLocked(now time.Time) Status {
	var st Status
	longest := h.longestTimeout()
	open := false
	for w := range h.liveLocked(now) {
		st.Windows = append(st.Windows, w)
		if !w.holds(now, h.opts.MaxHoldBack) {
			st.Degraded = st.Degraded || w.blinds(now, longest)
			continue
		}
		if !st.Active || w.From.Before(st.Since) {
			st.Since, st.Reason = w.From, w.Reason
			if w.Replica != h.opts.ReplicaID {
				st.Reason += " (replica " + w.Replica + ")"
			}
		}
		open = open || w.To.IsZero()
		st.Until = maxTime(st.Until, w.until())
		st.Active = true
	}
	if open {
		st.Until = time.Time{}
	}
	st.ByType = h.byTypeLocked(now)
	slices.SortFunc(st.Windows, func(a, b Window) int { return a.From.Compare(b.From) })
	if h.clockErr != nil {
		if h.clockHoldsLocked(now) {
			st.Clock = h.clockErr.Error()
		} else {
			st.Degraded = true
			st.Clock = h.clockErr.Error() + fmt.Sprintf(" (scanning again after detection.max_hold_back %s)", h.opts.MaxHoldBack)
		}
	}
	return st
}

// byTypeLocked is how the windows hold each configured type they hold at now.
func (h *Tracker) byTypeLocked(now time.Time) map[string]TypeHold {
	if h.opts.Timeouts == nil {
		return nil
	}
	var out map[string]TypeHold
	live := slices.Collect(h.liveLocked(now))
	for name, timeout := range h.opts.Timeouts() {
		var th TypeHold
		held, open := false, false
		for _, w := range live {
			if !w.holdsFor(now, timeout, h.opts.MaxHoldBack) {
				continue
			}
			held = true
			th.Grace = max(th.Grace, w.graceFor(timeout))
			th.Until = maxTime(th.Until, w.untilFor(timeout))
			open = open || w.To.IsZero()
		}
		if !held {
			continue
		}
		th.Since = watermark(now, live, timeout, h.opts.MaxHoldBack) // the scanner's own rule, chains included
		if open {
			th.Until = time.Time{}
		}
		if out == nil {
			out = map[string]TypeHold{}
		}
		out[name] = th
	}
	return out
}

// report logs and announces what changed since the last report: the hold starting, moving or ending,
// detection turning degraded or trusted again, this replica's clock.
func (h *Tracker) report(now time.Time) {
	h.reportMu.Lock()
	defer h.reportMu.Unlock()
	h.mu.Lock()
	st := h.statusLocked(now)
	h.mu.Unlock()
	prev := h.reported
	h.reported = st
	wake := false
	if prev.Active != st.Active || !prev.Since.Equal(st.Since) {
		if st.Active {
			h.log.Warn("detection held back", zap.Time("since", st.Since), zap.Time("until", st.Until), zap.String("reason", st.Reason),
				zap.Int("windows", len(st.Windows)))
		} else if prev.Active {
			h.log.Info("hold-back ended: claiming every passed deadline again")
		}
		if prev.Active != st.Active {
			h.heldBack.Set(b2f(st.Active))
			if h.opts.OnChange != nil {
				h.opts.OnChange(st.Active)
			}
		}
		wake = true
	}
	if prev.Degraded != st.Degraded {
		if st.Degraded {
			var why []string
			for _, w := range st.Windows {
				if !w.holds(now, h.opts.MaxHoldBack) {
					why = append(why, w.Replica+"/"+w.ID+": "+w.Reason)
				}
			}
			if st.Clock != "" {
				why = append(why, st.Clock)
			}
			h.log.Error(`blind for longer than detection.max_hold_back: detection resumed, degraded (events carry "degraded": true)`,
				zap.Duration("max_hold_back", h.opts.MaxHoldBack), zap.Strings("windows", why))
		} else {
			h.log.Info("detection no longer degraded")
		}
		wake = true
	}
	if prev.Clock == "" && st.Clock != "" && !st.Degraded {
		h.log.Error("this replica claims nothing while its clock cannot be trusted", zap.String("clock", st.Clock))
		wake = true
	} else if prev.Clock != "" && st.Clock == "" {
		h.log.Info("clock trusted again: claiming")
		wake = true
	}
	if wake {
		select {
		case h.changed <- struct{}{}:
		default:
		}
	}
}
