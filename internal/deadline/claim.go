package deadline

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Claim is one device handed to the alarm loop (doc.go: claim, lease, commit).
type Claim struct {
	Device string
	Slot   int
	Type   string // its configured type
	// OwnTimeout is the device's own timeout when it was registered with one (0: its type's); its
	// policy is its type's with that timeout (config.Policy.WithOwnTimeout).
	OwnTimeout time.Duration
	State      State // the incident as stored; State.Deadline identifies it
	// Fresh is true when the deadline just passed (claimed from the deadlines set), false when the alarm
	// entry came due (a repeat, a redelivery after a lease, or a recovery probe).
	Fresh bool
	// Replaced is, on the fresh claim that began this incident, the earlier incident of the same device
	// that was still open: the device signalled and fell silent again before it was settled. The
	// recovery it may owe is in State.Owed, which outlives this claim; Replaced is only what to put back
	// should the claim be undone (layout.go).
	Replaced *State
	// Record names the in-flight record of a committed claim, "" on others. State is handed out as
	// nothing sent yet, though Redis already holds the committed outcome; releasing the record settles it.
	Record string
	// CommittedRepeat is the repeat interval the committed next act was computed with (0: dormant), so
	// alarm.Decide can tell whether the commit stands under the policy in force.
	CommittedRepeat time.Duration
	// CommittedSuppression: its down parent's wake committed `suppressed` for this waiting child
	// (wake.go). Like any committed claim's, State is handed out as nothing sent yet. WokenBy is that
	// parent when the claim knows it ("" for a record handed out again).
	CommittedSuppression bool
	WokenBy              string
	// HeldBack: a deferred incident (late, past a quiet interval, after its parent's recovery) whose
	// interruption the hold-back does not allow yet (warn.go, holdDeferredBack).
	HeldBack bool
	// Cause is why the incident began when it was not silence (a reported failure, offline); nil: silence.
	Cause *Cause
	// LeasedUntil is when the claim's lease runs out (the claim's time + ClaimOptions.Lease; zero without
	// a lease): from then another replica may claim the same incident, so an act not yet published is
	// left to that claim.
	LeasedUntil time.Time
	// LastSignal is the device's last signal before the incident when its deadline was written under
	// another timeout than its type's now (a reload, a new own timeout; internal/typeindex); zero otherwise,
	// when it is the deadline less the policy's lead.
	LastSignal time.Time
}

// HandedOutAgain reports whether c comes from an in-flight record whose lease ran out (its replica died,
// or lost Redis, before releasing it): what it committed may have been published, or not. A wake's own
// suppression claims name their parent (WokenBy); a claim's own commits are fresh.
func (c Claim) HandedOutAgain() bool { return c.Record != "" && !c.Fresh && c.WokenBy == "" }

// ClaimResult is what one wake-up found.
type ClaimResult struct {
	Claims []Claim
	// More is true when a slot returned a full batch: claim again at once.
	More bool
	// NextDeadline is the earliest deadline left in the claimed slots that a claim may take once it is
	// due: while hold-back holds some types, the first after now of a type it does not hold, and zero
	// while it holds every type (a watermark that moves on by itself). NextAlarm is the earliest due
	// alarm entry. Zero when none.
	NextDeadline, NextAlarm time.Time
	// SlotNext is, per claimed slot in the order given, the earlier of the two in that slot, the claim's
	// own time when that slot returned a full batch, or zero when neither is known: the scanner sleeps
	// until the earliest instead of polling, and claims only the slots due (internal/scan, slotSchedule).
	SlotNext []time.Time
}

// ClaimOptions bounds one claim.
type ClaimOptions struct {
	Now       time.Time
	Watermark time.Time // deadlines later than this stay put (hold-back); zero = Now
	// WatermarkFor, when set, bounds the deadlines further by each device's timeout (hold-back after a
	// blind window, docs/concepts.md): a device whose type's timeout is t is claimed only when its deadline
	// is no later than WatermarkFor(t).
	WatermarkFor WatermarkFunc
	// HeardAfter is the end of the latest blind window that still holds some devices back (zero: none,
	// or only open ones). A failure a device reported at or after it is claimed at its deadline, up to
	// WatermarkFor(0), without waiting for its type's grace: the device's own word, heard after the
	// window, cannot have been overtaken by a signal lost in it (docs/signals.md#reported-failures).
	HeardAfter time.Time
	Lease      time.Duration
	Batch      int // most fresh claims per slot, and most due alarm entries per slot
}

// heardWindow is the claim steps' ARGV[8]: "from,to" (ms), the deadlines of the reported failures
// claimed past their type's watermark, or "" when there are none.
func (o ClaimOptions) heardWindow() string {
	if o.HeardAfter.IsZero() || o.WatermarkFor == nil {
		return ""
	}
	to := minTime(o.WatermarkFor(0), o.Now)
	if to.Before(o.HeardAfter) {
		return ""
	}
	return strconv.FormatInt(o.HeardAfter.UnixMilli(), 10) + "," + strconv.FormatInt(to.UnixMilli(), 10)
}

// watermark is the fleet's watermark of a claim: Watermark, never past Now (zero: Now).
func (o ClaimOptions) watermark() time.Time {
	if o.Watermark.IsZero() || o.Watermark.After(o.Now) {
		return o.Now
	}
	return o.Watermark
}

// WatermarkFunc is what hold-back lets a claim take at one moment: the latest deadline that may be
// claimed of a device whose timeout is timeout. A device that may have signalled unseen in a blind window
// waits its own timeout of visible time after the window, so a 30 s gateway is watched again long before
// a 2 h meter.
type WatermarkFunc func(timeout time.Duration) time.Time

// inFlightRecheck is how often a due entry waiting on an in-flight record (a device that signalled
// between its committed claim and the record's release) looks again: its recovery goes out this soon
// after the release, where waiting for the record's lease would delay it by up to detection.lease.
const inFlightRecheck = 250 * time.Millisecond

// nextScanBound bounds how many members a claim (those after now) or a peek (the first ones) reads while
// hold-back holds some types, to find the next deadline of a type it does not hold: past them the
// scanner polls, as it does while every type is held. A peek reads them all at once, on every idle look.
const nextScanBound = 4

// heldScanFactor bounds how many members of held types one claim steps over per slot, in batches: a slot
// with more of them ahead of a due member of a released type claims that one once they are released.
const heldScanFactor = 4

// Claim claims the due devices of slots in one round trip.
//
// The act a committed claim stores is alarm.Decide's usual outcome for a fresh incident, carried out
// ahead of time with the repeat interval in force; Decide alone says whether it stands
// (alarm.Decision.Committed), and the alarm loop acknowledges the claims where it does not.
func (s *Store) Claim(ctx context.Context, slots []int, opts ClaimOptions) (ClaimResult, error) {
	var res ClaimResult
	if len(slots) == 0 {
		return res, nil
	}
	wm, wmByType := s.watermarkByIndex(opts.watermark(), opts.WatermarkFor)
	now := opts.Now.UnixMilli()
	repeats := byIndex(s.types, s.repeatEvery)
	acts := repeats.render(func(every time.Duration) string {
		if every == 0 {
			return dormantScore(now)
		}
		return strconv.FormatInt(now+every.Milliseconds(), 10)
	})
	record := s.newRecord()
	leads, _ := s.untypedTable()
	heard := opts.heardWindow()
	args := []any{now, wm.UnixMilli(), opts.Lease.Milliseconds(), opts.Batch, record, acts, wmByType, heard, leads.render(millis)}
	// The held step only while hold-back holds some types: it has nothing to claim otherwise.
	held := wmByType != "" || heard != ""
	steps := claimSteps.all[1:]
	if held {
		steps = claimSteps.all
	}
	scripts := make([]*redis.Script, 0, len(slots)*len(steps))
	calls := make([]scriptCall, 0, len(slots)*len(steps))
	for _, slot := range slots {
		keys := []string{s.keys.Deadlines(slot), s.keys.alarms(slot), s.keys.state(slot), s.keys.inFlight(slot),
			s.keys.causes(slot), s.keys.reported(slot), s.keys.seen(slot)}
		for _, step := range steps {
			scripts = append(scripts, step)
			calls = append(calls, scriptCall{Keys: keys[:claimStepKeys[step]], Args: args[:claimStepArgs[step]]})
		}
	}
	cmds, err := s.runScripts(ctx, scripts, calls, claimSteps.all)
	if err != nil {
		return res, fmt.Errorf("deadline: claim: %w", err)
	}
	var nextDeadline, nextAlarm int64 = -1, -1
	// Decoded first, so the claims are allocated once: a wake-up may hand over thousands.
	replies := make([]claimReply, len(slots))
	claims := 0
	for i := range slots {
		r, err := decodeClaimReply(stepReplies(cmds[i*len(steps):(i+1)*len(steps)], held), opts.Batch)
		if err != nil {
			return res, fmt.Errorf("%w (slot %d)", err, slots[i])
		}
		replies[i] = r
		claims += (len(r.committed)+len(r.again)+len(r.due))/2 + len(r.replacing)/3
	}
	res.Claims = make([]Claim, 0, claims)
	res.SlotNext = make([]time.Time, len(replies))
	for i, r := range replies {
		nextDeadline = earliest(nextDeadline, r.nextDeadline)
		nextAlarm = earliest(nextAlarm, r.nextAlarm)
		res.More = res.More || r.more
		res.SlotNext[i] = msTime(float64(earliest(r.nextDeadline, r.nextAlarm)))
		if r.more {
			res.SlotNext[i] = opts.Now
		}
		if res.Claims, err = s.appendClaims(ctx, res.Claims, slots[i], r, record, repeats); err != nil {
			return res, err
		}
	}
	if opts.Lease > 0 {
		leasedUntil := opts.Now.Add(opts.Lease)
		for i := range res.Claims {
			res.Claims[i].LeasedUntil = leasedUntil
		}
	}
	s.holdDeferredBack(res.Claims, opts.Now, opts.WatermarkFor)
	if l := s.layouts.Load(); l.Moving() && len(res.Claims) > 0 {
		if res.Claims, err = s.dropStaleMoved(ctx, l, res.Claims); err != nil {
			return res, err
		}
	}
	if nextDeadline >= 0 {
		res.NextDeadline = time.UnixMilli(nextDeadline)
	}
	if nextAlarm >= 0 {
		res.NextAlarm = time.UnixMilli(nextAlarm)
	}
	return res, nil
}

// watermarks applies watermarkFor to every type index this store knows, below wm: it returns the earliest
// of the watermarks and, where they differ, each index's (an index this replica has not learnt yet gets
// the earliest); nil where they do not.
func (s *Store) watermarks(wm time.Time, watermarkFor WatermarkFunc) (time.Time, []time.Time) {
	if watermarkFor == nil {
		return wm, nil
	}
	names := s.types.Names()
	byIndex := make([]time.Time, len(names))
	low, uniform := wm, true
	for i, name := range names {
		if name == "" {
			continue
		}
		byIndex[i] = wm
		if h := watermarkFor(AsStored(s.timeout(name))); h.Before(wm) {
			byIndex[i] = h
		}
		uniform = uniform && byIndex[i].Equal(byIndex[0])
		low = minTime(low, byIndex[i])
	}
	if uniform {
		return low, nil
	}
	for i, t := range byIndex {
		if t.IsZero() {
			byIndex[i] = low
		}
	}
	return low, byIndex
}

// watermarkByIndex is watermarks with each index's watermark (ms) as the claim steps take it,
// listSep-separated ("" where they do not differ).
func (s *Store) watermarkByIndex(wm time.Time, watermarkFor WatermarkFunc) (time.Time, string) {
	low, byIndex := s.watermarks(wm, watermarkFor)
	var b strings.Builder
	for i, t := range byIndex {
		if i > 0 {
			b.WriteString(listSep)
		}
		b.WriteString(strconv.FormatInt(t.UnixMilli(), 10))
	}
	return low, b.String()
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
