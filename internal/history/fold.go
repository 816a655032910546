package history

import (
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// outcome is what folding one event did to a device's history.
type outcome uint8

const (
	unchanged outcome = iota // nothing to keep (a duplicate, an act on no incident, a silence)
	changed
	erased   // deleted: the device's history goes with it
	refused  // the event broke the machine and says nothing to keep (counted)
	repaired // the event broke the machine: an incident opened while the kept one was open (counted)
)

// fold applies one published event to a device's history. It is idempotent by event: an event published
// again (at-least-once delivery) finds its incident already in the state it leads to and changes
// nothing, so a recorder that crashed after Kafka took a batch may record it again.
func fold(h *deviceHistory, e *event.Event) outcome {
	cur := h.latest()
	phase := event.Closed
	if cur != nil {
		phase = cur.Phase
	}
	next, err := phase.Next(e.Kind)
	if err != nil {
		return foldBroken(h, cur, e)
	}
	switch {
	case e.Kind == event.Deleted:
		// An older deletion published again must not erase what the device did since it came back.
		if cur != nil && cur.Opened > e.At.UnixMilli() {
			return unchanged
		}
		return erased
	case phase == event.Closed && next != event.Closed:
		if h.seen(e.Deadline.UnixMilli()) { // an opening event of an incident that already ended
			return unchanged
		}
		h.open(e, next)
		return changed
	case cur == nil:
		return unchanged // silenced, unsilenced, flapping with no incident: nothing to keep
	}
	return cur.apply(e, next)
}

// seen reports whether ms is the deadline of a kept incident's opening or interruption.
func (h *deviceHistory) seen(ms int64) bool {
	for i := range h.Incidents {
		if in := &h.Incidents[i]; in.Opened == ms || in.DownFrom == ms {
			return true
		}
	}
	return false
}

// open starts a new incident with its opening event e.
func (h *deviceHistory) open(e *event.Event, phase event.Phase) {
	opened := e.Deadline.UnixMilli()
	if len(h.Incidents) == 0 || h.KnownSince == 0 {
		h.KnownSince = opened
		if ls := e.LastSeen.UnixMilli(); !e.LastSeen.IsZero() && ls < opened {
			h.KnownSince = ls
		}
	}
	in := Incident{Opened: opened, FirstKind: e.Kind, Phase: phase, Cause: e.Cause, Reason: e.Reason,
		Parent: e.Parent, OutageID: e.OutageID}
	if e.Kind != event.Late {
		in.DownFrom = opened
	}
	h.Incidents = append(h.Incidents, in)
}

// apply folds an event the machine allows into the open incident in (next: the phase it leads to).
func (in *Incident) apply(e *event.Event, next event.Phase) outcome {
	before := *in
	in.Phase = next
	switch e.Kind {
	case event.Interrupted, event.Suppressed: // late → down, or suppressed → its own interruption
		if in.DownFrom == 0 {
			in.DownFrom = max(e.Deadline.UnixMilli(), in.Opened)
		}
		if e.Kind == event.Suppressed {
			in.Parent = e.Parent
		}
		if in.Cause == "" {
			in.Cause, in.Reason = e.Cause, e.Reason
		}
	case event.Alarm, event.Exhausted:
		in.Repeats = max(in.Repeats, e.Repeat)
		in.Exhausted = in.Exhausted || e.Kind == event.Exhausted
	case event.Acked:
		if in.AckedAt == 0 { // the first acknowledgement stands; a repeated one is the same act
			in.AckedAt, in.AckedBy = e.At.UnixMilli(), e.By
		}
	case event.Recovered:
		in.Closed = max(closedAt(e), in.Opened)
	}
	if in.OutageID == "" {
		in.OutageID = e.OutageID
	}
	if *in == before {
		return unchanged
	}
	return changed
}

// closedAt is when a recovered event says the device came back: its recovering signal (last_seen +
// silent_for_ms), else when the event was raised.
func closedAt(e *event.Event) int64 {
	if !e.LastSeen.IsZero() && e.SilentForMs > 0 {
		return e.LastSeen.UnixMilli() + e.SilentForMs
	}
	return e.At.UnixMilli()
}

// foldBroken handles an event the machine refuses: most often a duplicate of one already folded (a
// second interrupted of the same deadline, a recovered published again after the close), which changes
// nothing. An incident that opens while the kept one is still open means a close was never seen: the
// kept one is closed where the new one's last signal says the device was back, and the new one opens.
func foldBroken(h *deviceHistory, cur *Incident, e *event.Event) outcome {
	dl := e.Deadline.UnixMilli()
	if h.seen(dl) {
		return unchanged
	}
	opening := e.Kind == event.Late || e.Kind == event.Interrupted || e.Kind == event.Suppressed
	if !opening || cur == nil || !cur.Open() {
		return refused
	}
	closed := dl
	if !e.LastSeen.IsZero() && e.LastSeen.UnixMilli() < dl {
		closed = e.LastSeen.UnixMilli()
	}
	cur.Closed, cur.Phase = max(closed, cur.Opened), event.Closed
	next, _ := event.Closed.Next(e.Kind)
	h.open(e, next)
	return repaired
}
