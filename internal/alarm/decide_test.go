package alarm

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 30, 0, time.UTC) // the deadline
	dl := t0.UnixMilli()
	pol := config.Policy{Timeout: 30 * time.Second, RepeatEvery: time.Minute, MaxRepeats: 3}
	open := func(mod func(*deadline.State)) deadline.State {
		st := deadline.State{Deadline: dl}
		if mod != nil {
			mod(&st)
		}
		return st
	}
	sent := func(next int) func(*deadline.State) {
		return func(s *deadline.State) { s.Next, s.InterruptedAt = next, t0.Add(10*time.Millisecond).UnixMilli() }
	}
	type want struct {
		kinds     []event.Kind
		repeats   []int
		op        deadline.AckOp
		next      time.Time
		dormant   bool
		reason    reason
		committed bool // the claim already stored this decision: no ack
		state     func(*testing.T, deadline.State)
	}
	// committed is a plain fresh claim the claim stored as `interrupted` sent with the repeat interval every.
	committed := func(every time.Duration) deadline.Claim {
		return deadline.Claim{State: open(nil), Fresh: true, Record: "\x00claims:r:1", CommittedRepeat: every}
	}
	tests := []struct {
		name string
		in   input
		want want
	}{{
		name: "fresh claim: interrupted, next repeat one interval after it",
		in:   input{Claim: deadline.Claim{State: open(nil), Fresh: true}, Policy: pol, Now: t0.Add(10 * time.Millisecond)},
		want: want{kinds: []event.Kind{event.Interrupted}, repeats: []int{0}, op: deadline.Reschedule,
			next: t0.Add(10*time.Millisecond + time.Minute), reason: reasonInterrupted,
			state: func(t *testing.T, s deadline.State) {
				require.Equal(t, 1, s.Next)
				require.Equal(t, t0.Add(10*time.Millisecond).UnixMilli(), s.InterruptedAt)
			}},
	}, {
		name: "repeat due: alarm 1, next from the interruption, not from now",
		in:   input{Claim: deadline.Claim{State: open(sent(1))}, Policy: pol, Now: t0.Add(time.Minute + 50*time.Millisecond)},
		want: want{kinds: []event.Kind{event.Alarm}, repeats: []int{1}, op: deadline.Reschedule,
			next: t0.Add(10*time.Millisecond + 2*time.Minute), reason: reasonRepeat},
	}, {
		name: "last repeat: alarm then exhausted, dormant",
		in:   input{Claim: deadline.Claim{State: open(sent(3))}, Policy: pol, Now: t0.Add(3*time.Minute + 20*time.Millisecond)},
		want: want{kinds: []event.Kind{event.Alarm, event.Exhausted}, repeats: []int{3, 3}, op: deadline.Reschedule,
			dormant: true, reason: reasonExhausted,
			state: func(t *testing.T, s deadline.State) { require.True(t, s.Exhausted) }},
	}, {
		name: "max_repeats 0 repeats forever",
		in: input{Claim: deadline.Claim{State: open(sent(40))}, Policy: config.Policy{Timeout: 30 * time.Second, RepeatEvery: time.Minute},
			Now: t0.Add(40*time.Minute + 20*time.Millisecond)},
		want: want{kinds: []event.Kind{event.Alarm}, repeats: []int{40}, op: deadline.Reschedule,
			next: t0.Add(41*time.Minute + 10*time.Millisecond), reason: reasonRepeat},
	}, {
		name: "repeat_every 0: interrupted then dormant",
		in:   input{Claim: deadline.Claim{State: open(nil), Fresh: true}, Policy: config.Policy{Timeout: 30 * time.Second}, Now: t0},
		want: want{kinds: []event.Kind{event.Interrupted}, repeats: []int{0}, op: deadline.Reschedule, dormant: true, reason: reasonInterrupted},
	}, {
		name: "claimed before the repeat is due (lease, probe): no event, rescheduled at the due time",
		in:   input{Claim: deadline.Claim{State: open(sent(2))}, Policy: pol, Now: t0.Add(time.Minute + 30*time.Second)},
		want: want{op: deadline.Reschedule, next: t0.Add(10*time.Millisecond + 2*time.Minute), reason: reasonNotDue},
	}, {
		name: "repeat due long ago (after a silence): sent once, next timed from now",
		in:   input{Claim: deadline.Claim{State: open(sent(1))}, Policy: pol, Now: t0.Add(time.Hour)},
		want: want{kinds: []event.Kind{event.Alarm}, repeats: []int{1}, op: deadline.Reschedule, next: t0.Add(time.Hour + time.Minute), reason: reasonRepeat},
	}, {
		name: "signalled again after interrupted: recovered with the outage length, incident removed",
		in: input{Claim: deadline.Claim{State: open(sent(2))}, Policy: pol, Now: t0.Add(2*time.Minute + 100*time.Millisecond),
			Current: t0.Add(2*time.Minute + 30*time.Second)}, // signal at t0+2m
		want: want{kinds: []event.Kind{event.Recovered}, repeats: []int{0}, op: deadline.Remove, reason: reasonRecovered},
	}, {
		name: "signalled again before anything was sent: removed quietly",
		in:   input{Claim: deadline.Claim{State: open(nil)}, Policy: pol, Now: t0.Add(time.Second), Current: t0.Add(20 * time.Second)},
		want: want{op: deadline.Remove, reason: reasonQuietEnd},
	}, {
		name: "an older score (replayed signal) is not a recovery",
		in:   input{Claim: deadline.Claim{State: open(nil), Fresh: true}, Policy: pol, Now: t0, Current: t0.Add(-time.Second)},
		want: want{kinds: []event.Kind{event.Interrupted}, repeats: []int{0}, op: deadline.Reschedule, next: t0.Add(time.Minute), reason: reasonInterrupted},
	}, {
		name: "silenced: no event, looked at again when the silence ends, repeat count kept",
		in:   input{Claim: deadline.Claim{State: open(sent(1))}, Policy: pol, Now: t0.Add(time.Minute), SilencedUntil: t0.Add(2 * time.Hour)},
		want: want{op: deadline.Reschedule, next: t0.Add(2 * time.Hour), reason: reasonSilenced,
			state: func(t *testing.T, s deadline.State) { require.Equal(t, 1, s.Next) }},
	}, {
		name: "silence ended: the still-silent device alarms",
		in:   input{Claim: deadline.Claim{State: open(nil), Fresh: true}, Policy: pol, Now: t0.Add(time.Hour), SilencedUntil: t0.Add(time.Hour - time.Second)},
		want: want{kinds: []event.Kind{event.Interrupted}, repeats: []int{0}, op: deadline.Reschedule, next: t0.Add(time.Hour + time.Minute), reason: reasonInterrupted},
	}, {
		name: "recovery under a silence is still reported once the interruption was",
		in: input{Claim: deadline.Claim{State: open(sent(1))}, Policy: pol, Now: t0.Add(time.Minute), SilencedUntil: t0.Add(time.Hour),
			Current: t0.Add(time.Minute + 30*time.Second)},
		want: want{kinds: []event.Kind{event.Recovered}, repeats: []int{0}, op: deadline.Remove, reason: reasonRecovered},
	}, {
		name: "acked: no more repeats",
		in:   input{Claim: deadline.Claim{State: open(func(s *deadline.State) { sent(1)(s); s.Acked = true })}, Policy: pol, Now: t0.Add(time.Minute)},
		want: want{op: deadline.Reschedule, dormant: true, reason: reasonDormant},
	}, {
		name: "acked: recovery still reported",
		in: input{Claim: deadline.Claim{State: open(func(s *deadline.State) { sent(1)(s); s.Acked = true })}, Policy: pol, Now: t0.Add(time.Minute),
			Current: t0.Add(time.Minute)},
		want: want{kinds: []event.Kind{event.Recovered}, repeats: []int{0}, op: deadline.Remove, reason: reasonRecovered},
	}, {
		name: "exhausted stays dormant",
		in:   input{Claim: deadline.Claim{State: open(func(s *deadline.State) { sent(3)(s); s.Exhausted = true })}, Policy: pol, Now: t0.Add(time.Hour)},
		want: want{op: deadline.Reschedule, dormant: true, reason: reasonDormant},
	}, {
		name: "new incident replacing a reported one: recovered for the old, interrupted for the new",
		in: input{Claim: deadline.Claim{State: open(func(s *deadline.State) { s.Owed = t0.Add(-time.Hour).UnixMilli() }), Fresh: true},
			Policy: pol, Now: t0},
		want: want{kinds: []event.Kind{event.Recovered, event.Interrupted}, repeats: []int{0, 0}, op: deadline.Reschedule,
			next: t0.Add(time.Minute), reason: reasonInterrupted},
	}, {
		name: "previous publish failures are cleared by a success",
		in:   input{Claim: deadline.Claim{State: open(func(s *deadline.State) { s.Failures, s.Reason = 3, "kafka down" }), Fresh: true}, Policy: pol, Now: t0},
		want: want{kinds: []event.Kind{event.Interrupted}, repeats: []int{0}, op: deadline.Reschedule, next: t0.Add(time.Minute), reason: reasonInterrupted,
			state: func(t *testing.T, s deadline.State) { require.Zero(t, s.Failures); require.Empty(t, s.Reason) }},
	}, {
		name: "committed claim decided as the claim stored it: nothing to acknowledge",
		in:   input{Claim: committed(time.Minute), Policy: pol, Now: t0.Add(10 * time.Millisecond)},
		want: want{kinds: []event.Kind{event.Interrupted}, repeats: []int{0}, op: deadline.Reschedule,
			next: t0.Add(10*time.Millisecond + time.Minute), reason: reasonInterrupted, committed: true},
	}, {
		name: "committed claim without repeats: stored dormant, nothing to acknowledge",
		in:   input{Claim: committed(0), Policy: config.Policy{Timeout: 30 * time.Second}, Now: t0},
		want: want{kinds: []event.Kind{event.Interrupted}, repeats: []int{0}, op: deadline.Reschedule, dormant: true,
			reason: reasonInterrupted, committed: true},
	}, {
		name: "committed claim of an expired record, handed out again: published again, still as stored",
		in: input{Claim: deadline.Claim{State: open(nil), Record: "\x00claims:r:2", CommittedRepeat: time.Minute}, Policy: pol,
			Now: t0.Add(31 * time.Second)},
		want: want{kinds: []event.Kind{event.Interrupted}, repeats: []int{0}, op: deadline.Reschedule,
			next: t0.Add(31*time.Second + time.Minute), reason: reasonInterrupted, committed: true},
	}, {
		name: "committed claim, interval reloaded since the claim: acknowledged with the new one",
		in:   input{Claim: committed(30 * time.Second), Policy: pol, Now: t0},
		want: want{kinds: []event.Kind{event.Interrupted}, repeats: []int{0}, op: deadline.Reschedule, next: t0.Add(time.Minute),
			reason: reasonInterrupted},
	}, {
		name: "committed claim under a silence: acknowledged, nothing sent",
		in:   input{Claim: committed(time.Minute), Policy: pol, Now: t0, SilencedUntil: t0.Add(time.Hour)},
		want: want{op: deadline.Reschedule, next: t0.Add(time.Hour), reason: reasonSilenced},
	}, {
		name: "committed claim whose device signalled again: removed quietly",
		in:   input{Claim: committed(time.Minute), Policy: pol, Now: t0, Current: t0.Add(20 * time.Second)},
		want: want{op: deadline.Remove, reason: reasonQuietEnd},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Claim.Device, tt.in.Claim.Type = "dev-42", "gateway"
			got := decide(tt.in)
			var kinds []event.Kind
			var repeats []int
			for _, e := range got.Events {
				kinds = append(kinds, e.Kind)
				repeats = append(repeats, e.Repeat)
				require.Equal(t, event.ID(e.DeviceID, e.Deadline, e.Kind, e.Repeat), e.ID)
				require.Equal(t, "dev-42", e.DeviceID)
				require.Equal(t, "gateway", e.DeviceType)
			}
			require.Equal(t, tt.want.kinds, kinds)
			require.Equal(t, tt.want.repeats, repeats)
			require.Equal(t, tt.want.reason, got.Reason)
			require.Equal(t, tt.want.op, got.Ack.Op)
			require.Equal(t, tt.want.dormant, got.Ack.Dormant)
			require.Equal(t, tt.want.committed, got.Committed)
			if !tt.want.next.IsZero() {
				require.Equal(t, tt.want.next.UnixMilli(), got.Ack.Next.UnixMilli())
			}
			require.Equal(t, tt.in.Claim.State.Deadline, got.Ack.Claimed, "ack guarded by the claimed incident")
			if tt.want.state != nil {
				tt.want.state(t, got.Ack.State)
			}
		})
	}
}

func TestDecideEventFields(t *testing.T) {
	deadlineAt := time.Date(2026, 11, 22, 10, 0, 30, 0, time.UTC)
	now := deadlineAt.Add(12 * time.Millisecond)
	d := decide(input{Claim: deadline.Claim{Device: "dev-42", Type: "gateway", State: deadline.State{Deadline: deadlineAt.UnixMilli()}, Fresh: true},
		Policy: config.Policy{Timeout: 30 * time.Second, RepeatEvery: time.Minute}, Now: now})
	require.Len(t, d.Events, 1)
	e := d.Events[0]
	// The contract's first example, field by field (its id carried 2025's Unix ms; this is 2026-11-22T10:00:30Z).
	require.Equal(t, "dev-42/1795341630000/interrupted/0", e.ID)
	require.Equal(t, time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC), e.LastSeen)
	require.Equal(t, deadlineAt, e.Deadline)
	require.Equal(t, now, e.At)
	require.EqualValues(t, 30012, e.SilentForMs)

	// Recovery 90 s after the last signal: silent_for_ms is the outage, not the time since.
	st := d.Ack.State
	r := decide(input{Claim: deadline.Claim{Device: "dev-42", Type: "gateway", State: st}, Current: deadlineAt.Add(90 * time.Second),
		Policy: config.Policy{Timeout: 30 * time.Second, RepeatEvery: time.Minute}, Now: deadlineAt.Add(200 * time.Second)})
	require.Len(t, r.Events, 1)
	require.Equal(t, event.Recovered, r.Events[0].Kind)
	require.EqualValues(t, 90_000, r.Events[0].SilentForMs)
}

func TestFailedBacksOffThenParks(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	c := deadline.Claim{Device: "d", Slot: 3, State: deadline.State{Deadline: 42, Next: 1}}
	down := errors.New("kafka: broker unreachable")

	// Kafka down, however long: backed off up to PublishBackoffMax, jittered, never parked.
	for i := 1; i <= 50; i++ {
		a := failedAck(c, down, false, 5, now)
		require.Equal(t, deadline.Reschedule, a.Op, "attempt %d", i)
		require.Equal(t, i, a.State.Failures)
		require.Equal(t, 1, a.State.Next, "the pending repeat is kept")
		full := min(time.Second<<min(i-1, 10), PublishBackoffMax)
		require.WithinRange(t, a.Next, now.Add(full/2), now.Add(full), "attempt %d", i)
		c.State = a.State
	}
	require.Equal(t, "kafka: broker unreachable", c.State.Reason)

	// Refused for its content: a count of its own, parked at the fifth refusal in a row.
	refused := errors.New("kafka refused the event: [10] Message Size Too Large")
	for i := 1; i < 5; i++ {
		a := failedAck(c, refused, true, 5, now)
		require.Equal(t, deadline.Reschedule, a.Op)
		require.Equal(t, i, a.State.Failures, "refusals counted from the first")
		c.State = a.State
	}
	a := failedAck(c, refused, true, 5, now)
	require.Equal(t, deadline.Park, a.Op)
	require.Equal(t, "refused: kafka refused the event: [10] Message Size Too Large", a.State.Reason)

	// An outage between refusals starts the count of refusals again.
	c.State.Failures = 4
	c.State = failedAck(c, down, false, 5, now).State
	require.Equal(t, 1, c.State.Failures)
	require.Equal(t, deadline.Reschedule, failedAck(c, refused, true, 5, now).Op)

	long := failedAck(c, errors.New(strings.Repeat("é", 300)), false, 5, now)
	require.LessOrEqual(t, len(long.State.Reason), 200)
	require.True(t, utf8.ValidString(long.State.Reason))
}

// A child whose down parent's wake committed `suppressed` ahead of time, decided `interrupted` after
// all (its parent came back before the loop looked): the commit does not stand, even for a type
// without repeats, so the acknowledgement stores the interruption instead of the suppression.
func TestCommittedSuppressionDecidedInterruptedIsAcknowledged(t *testing.T) {
	t0 := time.Date(2026, 6, 10, 0, 0, 0, 0, time.UTC)
	noRepeats := config.Policy{Timeout: time.Minute}
	c := deadline.Claim{Device: "child", Record: "r1", CommittedSuppression: true, State: deadline.State{Deadline: t0.UnixMilli()}}
	d := decide(input{Claim: c, Policy: noRepeats, Now: t0.Add(time.Second)})
	require.Equal(t, reasonInterrupted, d.Reason)
	require.False(t, d.Committed, "the wake stored a suppression, not this interruption")
	require.Equal(t, 1, d.Ack.State.Next)
	require.Equal(t, deadline.HoldNone, d.Ack.State.Hold)
}
