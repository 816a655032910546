package alarm

import (
	"time"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// heldRecheck is how often a deferred incident whose interruption the hold-back does not allow yet looks
// again (deadline.Claim.HeldBack).
const heldRecheck = time.Second

// decideLate handles the early warning of a type with warn_after (docs/events.md, `late`). Such a type's
// incident starts at its warning, last signal + warn_after (the claim's deadline): `late` goes out once
// and the incident waits, in deadline.HoldLate, for its interruption at last signal + timeout. A device
// that signals first is reported `recovered` by the usual re-check, as a reported incident is.
//
// held: d is the decision (`late` sent, or the interruption deferred). applies: the claim is a warned
// incident whose interruption is due now; eventDeadline is then the deadline its `interrupted` carries,
// and in no longer holds it, so decide goes on as for any fresh incident. Neither: nothing to do here.
//
// A warning inside a quiet interval is not sent: the incident waits for its deadline as a quiet-moved
// one (HoldQuiet), judged then by decideQuiet. An interruption inside one is deferred to the interval's
// end + timeout, still HoldLate when `late` went out, so its recovery is still reported.
func decideLate(in *input, d *decision) (eventDeadline time.Time, held, applies bool) {
	st := &in.Claim.State
	wasLate := st.Hold == deadline.HoldLate && st.Next == 0
	if !wasLate && (in.Policy.WarnAfter <= 0 || in.Claim.Cause != nil) {
		// A type without warn_after, or an incident the device or its broker reported (a failure, offline):
		// interrupted at once, no warning first.
		return time.Time{}, false, false
	}
	pol, now := &in.Policy, in.Now
	var due time.Time
	switch {
	case wasLate:
		if due = time.UnixMilli(st.InterruptedAt); due.After(now) { // claimed early (a lease ran out, a probe)
			d.Ack.Next = due
			d.Reason = reasonNotDue
			return time.Time{}, true, false
		}
	case st.Hold == deadline.HoldNone && st.Next == 0 && pol.WarnAfter > 0:
		warnAt := st.DeadlineTime()
		due = warnAt.Add(pol.Timeout - pol.WarnAfter)
		if due.After(now) {
			if _, quiet := pol.Calendar.QuietUntil(warnAt); quiet {
				// No warning in a quiet interval; the deadline is judged when it comes, as a moved one.
				d.Ack.State.Hold, d.Ack.State.InterruptedAt = deadline.HoldQuiet, due.UnixMilli()
				d.Ack.Next = due
				d.Reason = reasonQuiet
				return time.Time{}, true, false
			}
			c := in.Claim
			d.Events = append(d.Events, event.New(event.Late, c.Device, c.Type, warnAt, warnAt.Add(-pol.WarnAfter), now, 0))
			d.Ack.State.Hold, d.Ack.State.InterruptedAt = deadline.HoldLate, due.UnixMilli()
			d.Ack.Next = due
			d.Reason = reasonLate
			return time.Time{}, true, false
		}
		// Claimed after its deadline (hold-back, a backlog): the interruption is due, a warning says nothing.
	default:
		return time.Time{}, false, false
	}
	if until, quiet := pol.Calendar.QuietUntil(due); quiet {
		moved := until.Add(pol.Timeout)
		d.Ack.State.Hold, d.Ack.State.InterruptedAt = deadline.HoldQuiet, moved.UnixMilli()
		if wasLate {
			d.Ack.State.Hold = deadline.HoldLate
		}
		d.Ack.Next = moved
		d.Reason = reasonQuiet
		return time.Time{}, true, false
	}
	// From here an incident like any other, judged by the deadline it is interrupted at. The state to
	// acknowledge keeps HoldLate until an interruption is sent, so a wait (a parent's verdict) that ends
	// with a recovery still reports it.
	in.Claim.State.Hold, in.Claim.State.InterruptedAt = deadline.HoldNone, 0
	return due, false, true
}

// ownDeadline is incidentDeadline for the claim's own incident: one a device or its broker reported (a
// failure, offline) carries the deadline the report set, warned type or not.
func ownDeadline(in *input, st *deadline.State) time.Time {
	if c := in.Claim.Cause; c != nil && c.Deadline == st.Deadline {
		return st.DeadlineTime()
	}
	return incidentDeadline(st, &in.Policy)
}

// EventTimes are the deadline and last signal the events of an incident (or of a device's stored
// deadline, as a State with only Deadline set) carry under pol, for the operator acts' events.
func EventTimes(st deadline.State, pol config.Policy) (dl, lastSeen time.Time) {
	return incidentDeadline(&st, &pol), st.DeadlineTime().Add(-lead(&pol))
}

// lead is how far after the last signal an incident of pol starts: its warning, else its timeout.
func lead(pol *config.Policy) time.Duration {
	if pol.WarnAfter > 0 {
		return pol.WarnAfter
	}
	return pol.Timeout
}

// incidentDeadline is the deadline the events of an incident carry: the warning's while it was only
// reported late, else the deadline its interruption came at (last signal + timeout).
func incidentDeadline(st *deadline.State, pol *config.Policy) time.Time {
	dl := st.DeadlineTime()
	if pol.WarnAfter <= 0 || (st.Hold == deadline.HoldLate && st.Next == 0) {
		return dl
	}
	return dl.Add(pol.Timeout - pol.WarnAfter)
}
