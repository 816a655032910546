// Package alarm is the state machine after a deadline passes: it turns the scanner's claims into
// interrupted → alarm repeats → recovered / exhausted events (and late, suppressed, flapping), honours
// operator acks, silences and quiet intervals, lets a deferred incident's interruption wait while the
// hold-back (internal/holdback) says heartbeatd may not have heard the device, and acknowledges each claim
// in Redis only after its events were published.
//
// decide is the whole policy as a pure function; Handler is the loop around it (re-check, publish,
// acknowledge). Silences are internal/silence's and outages internal/correlate's: the Handler asks a
// SilenceChecker and a *correlate.Correlator. Beside it: Acts publishes the events of operator acts,
// Watchdog vouches for the detection path with a periodic event, and Metrics are the alarm loop's series,
// RunCounts keeping the device counts current.
package alarm

import (
	"strings"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// input is everything decide looks at for one claim.
type input struct {
	Claim deadline.Claim
	// Current is the device's deadline in the deadlines set now (zero when absent): later than the
	// claim's deadline means the device signalled again since the incident began.
	Current time.Time
	// Policy is the claim type's policy (also the one the recovery it owes is reported under, State.Owed).
	Policy config.Policy
	// SilencedUntil is when the latest silence matching the device ends; zero or past = not silenced.
	SilencedUntil time.Time
	// Parent is the device's parent (gateway, cell) when it has one; nil otherwise. ParentWait is how long
	// past the parent's deadline a child waits for the parent's verdict (detection.parent_wait).
	Parent     *deadline.Parent
	ParentWait time.Duration
	// OutageID is the open correlated outage of one of the device's groups ("" when none): its
	// `interrupted` carries it, and its repeats wait while the outage lasts (docs/concepts.md).
	OutageID string
	// GroupWait, when set, is how long a new `interrupted` without an outage waits while one of its
	// groups may still reach its threshold (correlation.group_wait); the handler sets it only then.
	GroupWait time.Duration
	// Flaps are the times (unix ms, oldest first) of the device's last interruptions, read when its
	// type detects flapping.
	Flaps []int64
	// Seen are the recorded signal times of a device whose type has expected times (a schedule), whose
	// last signal cannot be told from its deadline; nil for a type timed by its timeout.
	Seen *deadline.SeenTimes
	// Announcing: an operator's ack of the incident is still being announced (deadline.Store.SetAcked),
	// so its `recovered` waits for the `acked` event.
	Announcing bool
	Now        time.Time
}

// announceRecheck is how often a recovery waiting for an ack's announcement looks again: an act's event
// is out within milliseconds unless Kafka is slow, and the hold ends by itself (alarm.Acts.RecoveryHold).
const announceRecheck = 100 * time.Millisecond

// reason says why decide chose what it chose; it is logged and tested, never sent to consumers.
type reason string

// The reasons decide gives.
const (
	reasonInterrupted reason = "interrupted"  // first event of an incident
	reasonRepeat      reason = "repeat"       // a re-alarm
	reasonExhausted   reason = "exhausted"    // the last re-alarm; dormant until recovery
	reasonRecovered   reason = "recovered"    // the device signalled again after an interruption was sent
	reasonQuietEnd    reason = "quiet-end"    // it signalled again before anything was sent (silenced): no event
	reasonSilenced    reason = "silenced"     // a silence covers it: act again when the silence ends
	reasonDormant     reason = "dormant"      // acked or exhausted: wait for recovery
	reasonNotDue      reason = "not-due"      // claimed before its repeat was due (lease, probe, reload)
	reasonNoRepeats   reason = "no-repeats"   // repeat_every 0: wait for recovery
	reasonAckedSilent reason = "acked-silent" // acked after interrupted: wait for recovery
	reasonParentWait  reason = "parent-wait"  // the parent is silent too: wait for its verdict
	reasonSuppressed  reason = "suppressed"   // the parent is down: `suppressed`, no repeats while it is
	reasonParentBack  reason = "parent-back"  // the parent recovered: own verdict one timeout after it
	reasonOutage      reason = "outage"       // a correlated outage covers it: no repeats while it lasts
	reasonFlapping    reason = "flapping"     // flapping: no repeats until stable for a window
	reasonGroupWait   reason = "group-wait"   // its group may become an outage: interrupted waits
	reasonQuiet       reason = "quiet"        // inside a quiet interval of its type: deferred, or its repeats paused
	reasonLate        reason = "late"         // warn_after passed: `late`, interrupted at the timeout unless it signals
	reasonHeldBack    reason = "held-back"    // deferred (late, quiet, after its parent); its interruption waits for the hold-back
	reasonAnnouncing  reason = "announcing"   // it signalled again while its ack is announced: recovered waits for acked
)

// parentRecheck is how often a suppressed device looks at its parent again, besides being woken when
// the parent recovers (deadline.Store.WakeChildren): the safety net for a wake-up that never came.
const parentRecheck = deadline.ParentRecheck

// decision is what to publish for a claim and how to acknowledge it once published.
type decision struct {
	Events []event.Event // in publication order; may be empty
	Ack    deadline.Ack
	Reason reason
	// Committed: the claim already stored Ack (a committed claim decided as committed), so the Handler
	// carries it out by releasing the claim's record (deadline.Store.Settle), not by acknowledging.
	Committed bool
	// Flaps is the device's interruption history to store after publishing; nil = unchanged.
	Flaps []int64
}

// decide applies the alarm policy to one claim.
//
//   - The re-check first: a newer deadline than the incident's means the device signalled again; if the
//     interruption was reported, `recovered` goes out with the outage length, and the incident ends.
//   - An incident that replaced one whose recovery was never published (the device came back and fell
//     silent again before it went out) reports that recovery first, then goes on (State.Owed).
//   - A matching silence suppresses events while it lasts; the incident is looked at again when it ends,
//     so a still-silent device alarms then. Recovery of an already reported interruption is still sent
//     under a silence: it closes what consumers have already seen.
//   - Otherwise repeat n (the state's Next) is sent when due: 0 `interrupted`, then `alarm` every
//     repeat_every; the max_repeats-th alarm is followed by `exhausted` and the incident goes dormant, as
//     does an operator-acknowledged one after its interruption was sent.
//
// Repeats are timed from the first interruption (no drift); a repeat that comes due late (after a silence
// or an outage) is sent once and the next one is timed from now, never as a burst.
//
// decide is the one place that decides an incident's next act. The claim only carries out ahead of time
// what decide decides for a plain fresh incident (deadline doc.go, "commit"): `interrupted`, then the next
// act one repeat interval away; a down parent's wake does the same with `suppressed` for its waiting
// children (deadline wake.go). decision.Committed tells whether this decision is that one.
func decide(in input) decision {
	d := decideIgnoringCause(in)
	if c := in.Claim.Cause; c != nil {
		withCause(d.Events, in.Claim.Device, *c)
	}
	if d.Ack.DropDeadline != 0 {
		d.Committed = false // what the claim committed does not drop the stale deadline: the ack must
	}
	return d
}

// withCause marks the events of the incident that began with cause (a reported failure, offline) with
// it, so consumers tell it from silence (docs/events.md).
func withCause(events []event.Event, device string, c deadline.Cause) {
	for i := range events {
		if e := &events[i]; e.DeviceID == device && e.Deadline.UnixMilli() == c.Deadline {
			e.Cause, e.Reason = c.Kind, c.Reason
		}
	}
}

// decideIgnoringCause is decide without the incident's cause: a recovery, or the waits that hold the incident (a
// silence, a warning, a quiet interval, its parent, its repeat schedule, a forming outage), or its
// next report.
func decideIgnoringCause(in input) decision {
	c, st, now := in.Claim, in.Claim.State, in.Now
	d := decision{Ack: deadline.Ack{Device: c.Device, Slot: c.Slot, Claimed: st.Deadline, State: st}}
	d.Ack.State.Failures, d.Ack.State.Reason = 0, ""
	if owed := st.OwedIncident(); owed != nil {
		d.Events = append(d.Events, owedRecovered(in, *owed))
		d.Ack.State.Owed, d.Ack.State.OwedWarned = 0, false
	}
	if !in.Current.IsZero() && in.Current.After(st.DeadlineTime()) {
		if !olderThanFailure(in) {
			if in.Announcing {
				d.Ack.Op, d.Ack.Next, d.Reason = deadline.Reschedule, now.Add(announceRecheck), reasonAnnouncing
				return d
			}
			decideRecovery(in, &d)
			return d
		}
		// The signal that set the newer deadline is no newer than the failure the incident began with
		// (replayed from Kafka, or overtaken on its way): no recovery. Its deadline goes, and the incident
		// goes on as if it had never come.
		d.Ack.DropDeadline = in.Current.UnixMilli()
		in.Current = time.Time{}
	}

	d.Ack.Op = deadline.Reschedule
	if in.SilencedUntil.After(now) {
		d.Ack.Next = in.SilencedUntil
		d.Reason = reasonSilenced
		return d
	}
	eventDeadline, held, warned := decideLate(&in, &d)
	if held {
		return d
	}
	if !warned {
		if eventDeadline, held = decideQuiet(&in, &d); held {
			return d
		}
	}
	if in.Claim.HeldBack {
		// A deferred incident came due while a blind window may hide the signals that would end it: it
		// waits as a fresh claim of its deadline would (deadline.Store.holdDeferredBack), still deferred.
		d.Ack.State.Hold, d.Ack.State.InterruptedAt = c.State.Hold, c.State.InterruptedAt
		d.Ack.Next = now.Add(heldRecheck)
		d.Reason = reasonHeldBack
		return d
	}
	st = in.Claim.State
	n := st.Next
	if in.Parent != nil && mayBeHeld(st) {
		if held, ok := decideUnderParent(in, &d); held {
			return d
		} else if ok {
			n = 0 // the parent is back and the device is not: its own interruption, as if none was sent
		}
	}
	if n > 0 && repeatWaits(in, st, n, &d) {
		return d
	}
	if n == 0 && groupWait(in, &d, warned, eventDeadline) {
		return d
	}
	report(in, st, n, eventDeadline, &d)
	return d
}

// olderThanFailure reports whether the device's latest signal, which set its current deadline, is no
// newer than the failure it reported and its incident began with: a stale signal, which proves nothing
// about the device since it said it failed (docs/signals.md#reported-failures).
func olderThanFailure(in input) bool {
	c := in.Claim.Cause
	if c == nil || c.Kind != deadline.CauseReported || c.Deadline != in.Claim.State.Deadline {
		return false
	}
	latest := in.Current.Add(-lead(&in.Policy))
	if in.Seen != nil && !in.Seen.Latest.IsZero() {
		latest = in.Seen.Latest
	}
	return !latest.After(c.LastSeen)
}

// owedRecovered is the `recovered` of an earlier incident the device's new silence replaced: it
// signalled (so it recovered) and fell silent again before the recovery went out. The incident keeps
// owing it (State.Owed) until it is published, through publish retries and crashes alike.
func owedRecovered(in input, old deadline.State) event.Event {
	oldSeen := old.DeadlineTime().Add(-lead(&in.Policy))
	if in.Seen != nil && !in.Seen.Pinned.IsZero() {
		oldSeen = in.Seen.Pinned
	}
	backAt := lastSignal(in) // the last signal before the new silence ended the old one
	return recovered(in.Claim.Device, in.Claim.Type, incidentDeadline(&old, &in.Policy), oldSeen, backAt, in.Now)
}

// decideRecovery ends an incident whose device signalled past its deadline: `recovered` when it was
// reported, nothing when it never was (a quiet deferral that ran out, a warning not yet due). A claim
// handed out again from a record its replica never released may have been reported: its first event
// goes out again with the recovery.
func decideRecovery(in input, d *decision) {
	c, st, pol := in.Claim, in.Claim.State, in.Policy
	d.Ack.Op = deadline.Remove
	if !st.Reported() && !c.HandedOutAgain() {
		d.Reason = reasonQuietEnd
		return
	}
	lastSeen, backAt := st.DeadlineTime().Add(-lead(&pol)), in.Current.Add(-lead(&pol))
	switch {
	case c.Cause != nil:
		lastSeen = c.Cause.LastSeen
	case !c.LastSignal.IsZero():
		lastSeen = c.LastSignal // its deadline was set under another timeout than its type's now
	}
	if in.Seen != nil {
		if !c.Fresh && !in.Seen.Pinned.IsZero() {
			lastSeen = in.Seen.Pinned
		}
		backAt = in.Seen.Latest
	}
	dl := ownDeadline(&in, &st)
	if c.HandedOutAgain() {
		// Committed under a record its replica never released: its interrupted (or suppressed) may have
		// gone out before the replica died, so it is sent again, under the same id, with its recovery.
		kind := event.Interrupted
		if c.CommittedSuppression {
			kind = event.Suppressed
		}
		e := event.New(kind, c.Device, c.Type, dl, lastSeen, in.Now, 0)
		if kind == event.Suppressed && in.Parent != nil {
			e.Parent = in.Parent.ID
		}
		d.Events = append(d.Events, e)
	}
	d.Events = append(d.Events, recovered(c.Device, c.Type, dl, lastSeen, backAt, in.Now))
	d.Reason = reasonRecovered
}

// repeatWaits holds the n-th repeat of a reported incident: dormant (exhausted, acked, no repeats),
// not due yet, paused by a quiet interval, explained by an open outage, or flapping. held: d says so.
func repeatWaits(in input, st deadline.State, n int, d *decision) (held bool) {
	pol, now := in.Policy, in.Now
	switch {
	case st.Exhausted || st.Acked:
		d.Ack.Dormant, d.Reason = true, reasonDormant
	case pol.RepeatEvery <= 0:
		d.Ack.Dormant, d.Reason = true, reasonNoRepeats
	default:
		if due := repeatDue(st, pol, n); due.After(now) {
			d.Ack.Next, d.Reason = due, reasonNotDue
		} else if resume, paused := repeatsPaused(st, pol, n, now); paused {
			d.Ack.Next, d.Reason = resume, reasonQuiet
		} else if in.OutageID != "" { // look again one interval on: the repeats resume if the outage ended
			d.Ack.Next, d.Reason = now.Add(pol.RepeatEvery), reasonOutage
		} else if stable, flapping := flappingUntil(in.Flaps, pol.Flapping, now); flapping {
			d.Ack.Next, d.Reason = stable, reasonFlapping
		} else {
			return false
		}
	}
	return true
}

// report sends the incident's next word — `interrupted` (n = 0, at eventDeadline; `flapping` with it
// when it is the type's flapping.count-th), else the n-th `alarm` (and `exhausted` at max_repeats) —
// and schedules the act after it.
func report(in input, st deadline.State, n int, eventDeadline time.Time, d *decision) {
	c, pol, now := in.Claim, in.Policy, in.Now
	dl := ownDeadline(&in, &st) // what its later events carry
	lastSeen := lastSignal(in)
	next := &d.Ack.State
	next.Next = n + 1
	next.Hold = deadline.HoldNone
	if n == 0 {
		next.InterruptedAt = now.UnixMilli()
		e := event.New(event.Interrupted, c.Device, c.Type, eventDeadline, lastSeen, now, 0)
		e.OutageID = in.OutageID
		d.Events = append(d.Events, e)
		d.Reason = reasonInterrupted
		if f := pol.Flapping; f.Count > 0 {
			d.Flaps = appendFlap(in.Flaps, f, now)
			if len(recentFlaps(in.Flaps, f, now)) == f.Count-1 { // this one is the Count-th in the window
				d.Events = append(d.Events, event.New(event.Flapping, c.Device, c.Type, dl, lastSeen, now, 0))
			}
		}
	} else {
		d.Events = append(d.Events, event.New(event.Alarm, c.Device, c.Type, dl, lastSeen, now, n))
		d.Reason = reasonRepeat
	}
	switch {
	case pol.MaxRepeats > 0 && n >= pol.MaxRepeats:
		d.Events = append(d.Events, event.New(event.Exhausted, c.Device, c.Type, dl, lastSeen, now, n))
		next.Exhausted = true
		d.Ack.Dormant = true
		d.Reason = reasonExhausted
	case pol.RepeatEvery <= 0:
		d.Ack.Dormant = true
	case st.Acked:
		d.Ack.Dormant = true
		d.Reason = reasonAckedSilent
	default:
		due := repeatDue(*next, pol, n+1)
		if !due.After(now) {
			due = now.Add(pol.RepeatEvery)
		}
		d.Ack.Next = due
	}
	// d.Flaps is set only with an `interrupted`: its repeats wait until it has been stable for a window.
	if stable, flapping := flappingUntil(d.Flaps, pol.Flapping, now); flapping && !d.Ack.Dormant {
		d.Ack.Next = stable
		d.Reason = reasonFlapping
	}
	// A claim commits with the interval in force when it claimed; a reload since makes it stale.
	// A warned incident's state says its interruption came at its timeout, not at the claimed warning.
	// A parent's wake commits `suppressed`, never `interrupted`: such a claim decided otherwise is
	// acknowledged in full, whatever its interval (a CommittedRepeat of 0 says nothing then).
	d.Committed = c.Record != "" && !c.CommittedSuppression && d.Reason == reasonInterrupted &&
		deadline.AsStored(pol.RepeatEvery) == c.CommittedRepeat && pol.WarnAfter == 0
}

// groupWait holds a new interruption without an outage while one of its groups may still reach its
// threshold (correlation.group_wait, from when it first came due). warned: an incident of a type with
// warn_after, due at eventDeadline, which waits from then with its state left as claimed (still late, so
// a recovery meanwhile is reported). held: d is that decision.
func groupWait(in input, d *decision, warned bool, eventDeadline time.Time) (held bool) {
	st, now := in.Claim.State, in.Now
	if in.OutageID != "" || in.GroupWait <= 0 {
		return false
	}
	since := now
	switch {
	case warned:
		since = eventDeadline
	case st.Hold == deadline.HoldGroup && st.InterruptedAt > 0:
		since = time.UnixMilli(st.InterruptedAt)
	}
	until := since.Add(in.GroupWait)
	if !until.After(now) {
		return false
	}
	if !warned {
		d.Ack.State.Hold, d.Ack.State.InterruptedAt = deadline.HoldGroup, since.UnixMilli()
	}
	d.Ack.Next = until
	d.Reason = reasonGroupWait
	return true
}

// decideQuiet defers an incident whose deadline falls in a quiet interval of its type (docs/schedules.md):
// nothing is sent, and it is looked at again at the interval's end + timeout, the moved deadline, kept in
// the state so a deferral that ran out is judged by it (and moved again if it is quiet too). held: d is
// that decision. Otherwise it returns the deadline the `interrupted` carries — the moved one after a
// deferral, so at − deadline stays the detection lateness — and clears the hold from in.
func decideQuiet(in *input, d *decision) (eventDeadline time.Time, held bool) {
	st, pol := in.Claim.State, in.Policy
	eventDeadline = ownDeadline(in, &st)
	if st.Hold == deadline.HoldQuiet {
		eventDeadline = time.UnixMilli(st.InterruptedAt)
	}
	if st.Next == 0 && pol.Calendar != nil && (st.Hold == deadline.HoldNone || st.Hold == deadline.HoldQuiet) {
		if until, quiet := pol.Calendar.QuietUntil(eventDeadline); quiet {
			moved := until.Add(pol.Timeout)
			d.Ack.State.Hold, d.Ack.State.InterruptedAt = deadline.HoldQuiet, moved.UnixMilli()
			d.Ack.Next = moved
			d.Reason = reasonQuiet
			return eventDeadline, true
		}
	}
	if st.Hold == deadline.HoldQuiet { // the deferral ran out: an incident like any other from here
		in.Claim.State.Hold, in.Claim.State.InterruptedAt = deadline.HoldNone, 0
		d.Ack.State.Hold, d.Ack.State.InterruptedAt = deadline.HoldNone, 0
	}
	return eventDeadline, false
}

// repeatsPaused reports whether repeat n, due now, falls in a quiet interval of the type, and if so when
// the repeats resume: the first repeat time of the incident's schedule at or after the interval's end.
func repeatsPaused(st deadline.State, pol config.Policy, n int, now time.Time) (time.Time, bool) {
	until, quiet := pol.Calendar.QuietUntil(now)
	if !quiet {
		return time.Time{}, false
	}
	resume := repeatDue(st, pol, n)
	if behind := until.Sub(resume); behind > 0 {
		resume = resume.Add((behind + pol.RepeatEvery - 1) / pol.RepeatEvery * pol.RepeatEvery)
	}
	return resume, true
}

// decideUnderParent judges a device whose parent may explain its silence (docs/concepts.md). held: d is the
// decision (wait, suppress, or wait for the own verdict after the parent's recovery). own: the device
// gets its own interruption now, although one was reported under its parent before.
func decideUnderParent(in input, d *decision) (held, own bool) {
	c, st, now, p, pol := in.Claim, in.Claim.State, in.Now, *in.Parent, in.Policy
	dl := ownDeadline(&in, &st)
	lastSeen := lastSignal(in)
	// The parent has been silent since the child's last signal (1 s of slack for their clocks).
	silentToo := p.Known && !p.LastSignal.After(lastSeen.Add(time.Second))
	switch {
	case (st.Hold == deadline.HoldNone || st.Hold == deadline.HoldGroup) && st.Next == 0:
		switch {
		case !silentToo:
			return false, false
		case p.Down:
			d.Ack.State.Next, d.Ack.State.Hold, d.Ack.State.InterruptedAt = 1, deadline.HoldParent, now.UnixMilli()
			e := event.New(event.Suppressed, c.Device, c.Type, dl, lastSeen, now, 0)
			e.Parent = p.ID
			d.Events = append(d.Events, e)
			d.Ack.Next = now.Add(parentRecheck)
			d.Reason = reasonSuppressed
			// Its down parent's wake stored this ahead of time (deadline wake.go).
			d.Committed = c.CommittedSuppression
			return true, false
		case now.Before(p.Deadline.Add(in.ParentWait)):
			d.Ack.Next = p.Deadline.Add(in.ParentWait) // or sooner: the parent's verdict wakes it
			d.Reason = reasonParentWait
			return true, false
		}
		return false, false // waited long enough: the parent was not declared down in time
	case st.Hold == deadline.HoldParent:
		if p.Known && p.Down {
			d.Ack.Next = now.Add(parentRecheck)
			d.Reason = reasonSuppressed
			return true, false
		}
		// The parent is back (or gone): the device's own timeout runs from the parent's recovery.
		if own := p.LastSignal.Add(pol.Timeout); p.Known && own.After(now) {
			d.Ack.State.Hold = deadline.HoldAfterParent
			d.Ack.Next = own
			d.Reason = reasonParentBack
			return true, false
		}
		return false, true
	}
	return false, true // HoldAfterParent came due: the device is still silent
}

// recentFlaps are the interruptions of flaps within the window before now.
func recentFlaps(flaps []int64, f config.Flapping, now time.Time) []int64 {
	from := now.Add(-f.Window).UnixMilli()
	for i, t := range flaps {
		if t > from {
			return flaps[i:]
		}
	}
	return nil
}

// appendFlap adds an interruption at now to the history, keeping the last f.Count within the window.
func appendFlap(flaps []int64, f config.Flapping, now time.Time) []int64 {
	out := append(append([]int64(nil), recentFlaps(flaps, f, now)...), now.UnixMilli())
	return out[max(len(out)-f.Count, 0):]
}

// flappingUntil reports whether the device is flapping at now (f.Count interruptions within the window)
// and when it will have been stable for one window: one window after the newest of them.
func flappingUntil(flaps []int64, f config.Flapping, now time.Time) (time.Time, bool) {
	if f.Count == 0 {
		return time.Time{}, false
	}
	recent := recentFlaps(flaps, f, now)
	if len(recent) < f.Count {
		return time.Time{}, false
	}
	return time.UnixMilli(recent[len(recent)-1]).Add(f.Window), true
}

// repeatDue is when repeat n of an incident is due: n intervals after the interruption was sent.
func repeatDue(st deadline.State, pol config.Policy, n int) time.Time {
	return time.UnixMilli(st.InterruptedAt).Add(time.Duration(n) * pol.RepeatEvery)
}

// lastSignal is the last signal before the claimed incident: the one its cause recorded, deadline −
// timeout (− warn_after for a type with one, whose incident starts at its warning), or for a type with
// expected times the one recorded (pinned once the incident was claimed; the latest on its first claim).
func lastSignal(in input) time.Time {
	if c := in.Claim.Cause; c != nil {
		return c.LastSeen // a moved deadline is no longer the last signal + timeout
	}
	if s := in.Seen; s != nil {
		if !in.Claim.Fresh && !s.Pinned.IsZero() {
			return s.Pinned
		}
		if !s.Latest.IsZero() {
			return s.Latest
		}
	}
	if !in.Claim.LastSignal.IsZero() {
		return in.Claim.LastSignal // its deadline was set under another timeout than its type's now
	}
	return in.Claim.State.DeadlineTime().Add(-lead(&in.Policy))
}

// recovered is the event that closes a reported incident; silent_for_ms is the outage length, from the
// last signal before it (lastSeen) to the first one after it (backAt).
func recovered(device, typ string, dl, lastSeen, backAt, now time.Time) event.Event {
	e := event.New(event.Recovered, device, typ, dl, lastSeen, now, 0)
	e.SilentForMs = 0
	if backAt.After(lastSeen) {
		e.SilentForMs = backAt.Sub(lastSeen).Milliseconds()
	}
	return e
}

// failedAck is how to acknowledge a claim whose events could not be published. A claim is never parked
// because Kafka is down, slow or short of in-sync replicas, however long that lasts: it stays leased and
// is tried again after publishBackoff. Only an event Kafka refused for its content (refused: retrying
// the same bytes cannot help) is parked in the dead set, once maxAttempts publications in a row were
// refused; /v1/stats shows it and POST /v1/dead/requeue re-drives it.
//
// State.Failures counts the consecutive failures of one kind, so a refusal after an outage starts its
// count afresh; the kind is kept as a mark on State.Reason.
func failedAck(c deadline.Claim, err error, refused bool, maxAttempts int, now time.Time) deadline.Ack {
	st := c.State
	if st.Failures > 0 && strings.HasPrefix(st.Reason, refusedMark) == refused {
		st.Failures++
	} else {
		st.Failures = 1
	}
	st.Reason = err.Error()
	if refused {
		st.Reason = refusedMark + st.Reason
	}
	if len(st.Reason) > maxReason {
		st.Reason = strings.ToValidUTF8(st.Reason[:maxReason], "")
	}
	a := deadline.Ack{Device: c.Device, Slot: c.Slot, Claimed: st.Deadline, State: st}
	if refused && st.Failures >= maxAttempts {
		a.Op = deadline.Park
		return a
	}
	a.Op = deadline.Reschedule
	a.Next = now.Add(publishBackoff(st.Failures))
	return a
}

// refusedMark starts the State.Reason of a claim whose last failure was a refusal of its content.
const refusedMark = "refused: "

// maxReason bounds the failure text kept in an incident's state (and shown for a parked claim).
const maxReason = 200

// PublishBackoffMax caps the wait between two publication attempts of a claim: while Kafka is down, each
// claim is tried about this often, and once Kafka is back the last claims go out within this long.
const PublishBackoffMax = 30 * time.Second

// publishBackoff is the wait before publication attempt failures+1: 1 s doubling up to
// PublishBackoffMax, drawn from the upper half of that (loop.Delay), so the claims that failed together
// during an outage do not all retry at the same instant when it ends.
func publishBackoff(failures int) time.Duration {
	return loop.Delay(max(failures-1, 0), time.Second, PublishBackoffMax)
}
