package holdback

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Open records that this replica cannot trust silence since from, until Close(id). Opening an id that
// is open keeps its start and when it was opened; one whose earlier window is over but still in some
// device's grace opens a window of its own (openLocked).
func (h *Tracker) Open(id string, cause Cause, scope Scope, from time.Time, reason string) {
	now := h.opts.Now()
	h.mu.Lock()
	h.openLocked(now, id, cause, scope, from, reason, false)
	h.mu.Unlock()
	h.report(now)
}

// Close ends window id at to; it keeps holding for the grace after to. An id that is not open is
// ignored.
func (h *Tracker) Close(id string, to time.Time) {
	now := h.opts.Now()
	h.mu.Lock()
	h.closeLocked(id, to)
	h.mu.Unlock()
	h.report(now)
}

// record adds a window that is already over (w.To set): a stall, or the time heartbeatd was down. It
// merges with a live window of the same id.
func (h *Tracker) record(w Window) {
	now := h.opts.Now()
	h.mu.Lock()
	h.recordLocked(now, w)
	h.mu.Unlock()
	h.report(now)
}

func (h *Tracker) find(id string) int {
	return slices.IndexFunc(h.local, func(w Window) bool { return w.ID == id })
}

// put stores w as this replica's window id, replacing a dead one of that id.
func (h *Tracker) put(w Window) {
	if i := h.find(w.ID); i >= 0 {
		h.local[i] = w
		return
	}
	h.local = append(h.local, w)
}

// openLocked opens window id, or keeps it open; kept says the source keeps what it does not deliver
// meanwhile (ProbeTrouble.Kept), and a window stays kept only while every cause of it is.
func (h *Tracker) openLocked(now time.Time, id string, cause Cause, scope Scope, from time.Time, reason string, kept bool) {
	from = earliest(from, now)
	if scope == "" {
		scope = ScopeAll
	}
	if i := h.find(id); i >= 0 && h.local[i].live(now) {
		w := &h.local[i]
		switch {
		case w.To.IsZero():
			w.From, w.Cause, w.Scope, w.Reason, w.Kept = earliest(w.From, from), cause, scope, reason, w.Kept && kept
			return
		case from.After(w.To) && h.countLocked(id) < maxWindowsPerID:
			// A trouble that began after the last one ended is a window of its own: the earlier one holds on
			// under a name of its own, each device for its own grace, and the new one neither starts at the
			// earlier start nor takes its grace (a lag the broker kept after a lost connection needs none).
			w.ID = id + "@" + strconv.FormatInt(w.To.UnixMilli(), 10)
		default:
			// Overlapping, or flapping past maxWindowsPerID: one window, whose first opening bounds the hold.
			h.log.Warn("blind window reopened within its grace", zap.String("window", id), zap.String("reason", reason))
			w.From, w.To, w.Cause, w.Scope, w.Reason, w.Kept = earliest(w.From, from), time.Time{}, cause, scope, reason, w.Kept && kept
			return
		}
	}
	h.put(Window{ID: id, Replica: h.opts.ReplicaID, Cause: cause, Scope: scope, From: from, Opened: now, Grace: h.opts.Grace(),
		Kept: kept, Reason: reason})
	h.log.Warn("blind window opened", zap.String("window", id), zap.String("cause", string(cause)), zap.Time("from", from),
		zap.String("reason", reason))
}

// maxWindowsPerID bounds how many windows one cause keeps live at once (openLocked): a source that
// flaps faster merges its troubles into the latest window.
const maxWindowsPerID = 8

// countLocked is how many of this replica's windows cause id holds: id itself and the earlier ones it
// renamed.
func (h *Tracker) countLocked(id string) int {
	n := 0
	for _, w := range h.local {
		if w.ID == id || strings.HasPrefix(w.ID, id+"@") {
			n++
		}
	}
	return n
}

func (h *Tracker) closeLocked(id string, to time.Time) {
	i := h.find(id)
	if i < 0 || !h.local[i].To.IsZero() {
		return
	}
	w := &h.local[i]
	w.To, w.Grace = maxTime(to, w.From), h.graceOf(*w)
	if w.Kept {
		h.log.Info("blind window closed; nothing was lost in it: no grace", zap.String("window", id),
			zap.Duration("lasted", w.To.Sub(w.From)))
		return
	}
	h.log.Info("blind window closed; each device is held its own timeout after it", zap.String("window", id),
		zap.Duration("lasted", w.To.Sub(w.From)), zap.Duration("grace", w.Grace), zap.Time("until", w.until()),
		zap.Any("grace_by_type", h.graceByType(*w)))
}

// graceOf is the grace cap of w as it closes: none for a window in which nothing was lost.
func (h *Tracker) graceOf(w Window) time.Duration {
	if w.Kept {
		return 0
	}
	return h.opts.Grace()
}

// graceByType is each configured type's grace after w, for the log.
func (h *Tracker) graceByType(w Window) map[string]string {
	if h.opts.Timeouts == nil {
		return nil
	}
	out := map[string]string{}
	for name, timeout := range h.opts.Timeouts() {
		out[name] = w.graceFor(timeout).String()
	}
	return out
}

func (h *Tracker) recordLocked(now time.Time, w Window) {
	w.Replica, w.Grace = h.opts.ReplicaID, h.graceOf(w)
	if w.Scope == "" {
		w.Scope = ScopeAll
	}
	if i := h.find(w.ID); i >= 0 && h.local[i].live(now) {
		prev := h.local[i]
		w.From, w.Opened = earliest(prev.From, w.From), prev.Opened
		if prev.To.IsZero() {
			w.To = time.Time{} // still open
		} else {
			w.To = maxTime(prev.To, w.To)
		}
	} else {
		w.Opened = now
	}
	h.put(w)
}

// stalled records a stall the detector found.
func (h *Tracker) stalled(from, to time.Time, gap time.Duration) {
	h.log.Warn("heartbeatd stalled: holding detection back over what it could not hear", zap.Time("from", from),
		zap.Duration("gap", gap), zap.Duration("detection.stall", h.opts.Stall))
	h.record(Window{ID: windowStall, Cause: causeStall, From: from, To: to,
		Reason: "heartbeatd stalled for " + gap.Round(time.Millisecond).String()})
}
