package alarm

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// A warned type's score is last signal + warn_after: its claim says `late` once, the next claim (at the
// timeout) `interrupted`, with distinct deterministic ids and the deadlines a consumer expects.
func TestDecideLateThenInterrupted(t *testing.T) {
	seen := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	pol := config.Policy{Timeout: 30 * time.Second, WarnAfter: 20 * time.Second, RepeatEvery: time.Minute}
	warnAt, due := seen.Add(20*time.Second), seen.Add(30*time.Second)
	claim := deadline.Claim{Device: "gw-1", Type: "gateway", Fresh: true, Record: "\x00claims:r:1", CommittedRepeat: time.Minute,
		State: deadline.State{Deadline: warnAt.UnixMilli()}}

	d := decide(input{Claim: claim, Policy: pol, Now: warnAt.Add(5 * time.Millisecond)})
	require.Equal(t, reasonLate, d.Reason)
	require.False(t, d.Committed, "the claim committed an interruption; the late state must be acknowledged")
	require.Len(t, d.Events, 1)
	late := d.Events[0]
	require.Equal(t, event.Late, late.Kind)
	require.Equal(t, "gw-1/"+itoa(warnAt.UnixMilli())+"/late/0", late.ID)
	require.Equal(t, seen, late.LastSeen)
	require.Equal(t, warnAt, late.Deadline)
	require.Equal(t, deadline.Reschedule, d.Ack.Op)
	require.WithinDuration(t, due, d.Ack.Next, 0, "interrupted at last signal + timeout")
	require.Equal(t, deadline.HoldLate, d.Ack.State.Hold)
	require.Zero(t, d.Ack.State.Next)

	// Redelivered before its interruption (a lease ran out): nothing again.
	again := decide(input{Claim: deadline.Claim{Device: "gw-1", Type: "gateway", State: d.Ack.State}, Policy: pol,
		Current: time.Time{}, Now: warnAt.Add(2 * time.Second)})
	require.Empty(t, again.Events, "one late per incident")
	require.WithinDuration(t, due, again.Ack.Next, 0)

	st := d.Ack.State
	d = decide(input{Claim: deadline.Claim{Device: "gw-1", Type: "gateway", State: st}, Policy: pol, Now: due.Add(3 * time.Millisecond)})
	require.Equal(t, reasonInterrupted, d.Reason)
	require.Len(t, d.Events, 1)
	in := d.Events[0]
	require.Equal(t, event.Interrupted, in.Kind)
	require.Equal(t, "gw-1/"+itoa(due.UnixMilli())+"/interrupted/0", in.ID)
	require.NotEqual(t, late.ID, in.ID)
	require.Equal(t, seen, in.LastSeen)
	require.Equal(t, due, in.Deadline)
	require.Equal(t, deadline.HoldNone, d.Ack.State.Hold)
	require.Equal(t, st.Deadline, d.Ack.State.Deadline, "the incident keeps its identity")

	// Its repeat and its recovery carry the deadline of the interruption and the true last signal.
	st = d.Ack.State
	d = decide(input{Claim: deadline.Claim{Device: "gw-1", Type: "gateway", State: st}, Policy: pol, Now: due.Add(time.Minute + 5*time.Millisecond)})
	require.Equal(t, event.Alarm, d.Events[0].Kind)
	require.Equal(t, due, d.Events[0].Deadline)
	back := due.Add(90 * time.Second)
	d = decide(input{Claim: deadline.Claim{Device: "gw-1", Type: "gateway", State: d.Ack.State}, Policy: pol,
		Current: back.Add(pol.WarnAfter), Now: back.Add(time.Millisecond)})
	require.Equal(t, reasonRecovered, d.Reason)
	require.Equal(t, event.Recovered, d.Events[0].Kind)
	require.Equal(t, due, d.Events[0].Deadline)
	require.Equal(t, seen, d.Events[0].LastSeen)
	require.Equal(t, back.Sub(seen).Milliseconds(), d.Events[0].SilentForMs)
}

// A device that signals after `late` and before its timeout is reported `recovered`: a consumer that
// saw the warning sees it cleared.
func TestDecideLateThenRecovered(t *testing.T) {
	seen := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	pol := config.Policy{Timeout: 30 * time.Second, WarnAfter: 20 * time.Second, RepeatEvery: time.Minute}
	warnAt := seen.Add(20 * time.Second)
	d := decide(input{Claim: deadline.Claim{Device: "gw-1", Fresh: true, State: deadline.State{Deadline: warnAt.UnixMilli()}},
		Policy: pol, Now: warnAt})
	require.Equal(t, reasonLate, d.Reason)

	back := seen.Add(25 * time.Second) // its signal's score is back + warn_after
	d = decide(input{Claim: deadline.Claim{Device: "gw-1", State: d.Ack.State}, Policy: pol,
		Current: back.Add(pol.WarnAfter), Now: back.Add(2 * time.Millisecond)})
	require.Equal(t, reasonRecovered, d.Reason)
	require.Equal(t, deadline.Remove, d.Ack.Op)
	require.Len(t, d.Events, 1)
	rec := d.Events[0]
	require.Equal(t, event.Recovered, rec.Kind)
	require.Equal(t, "gw-1/"+itoa(warnAt.UnixMilli())+"/recovered/0", rec.ID, "the late incident's deadline")
	require.Equal(t, seen, rec.LastSeen)
	require.Equal(t, (25 * time.Second).Milliseconds(), rec.SilentForMs)
}

func TestDecideLateEdges(t *testing.T) {
	seen := time.Date(2026, 6, 10, 0, 30, 0, 0, time.UTC)
	base := config.Policy{Timeout: 10 * time.Minute, WarnAfter: 4 * time.Minute, RepeatEvery: time.Hour}
	warnAt, due := seen.Add(4*time.Minute), seen.Add(10*time.Minute)
	fresh := deadline.Claim{Device: "d", Fresh: true, State: deadline.State{Deadline: warnAt.UnixMilli()}}

	t.Run("claimed after its timeout (hold-back released it): interrupted, no late", func(t *testing.T) {
		d := decide(input{Claim: fresh, Policy: base, Now: due.Add(time.Minute)})
		require.Equal(t, reasonInterrupted, d.Reason)
		require.Len(t, d.Events, 1)
		require.Equal(t, event.Interrupted, d.Events[0].Kind)
		require.Equal(t, due, d.Events[0].Deadline)
		require.Equal(t, seen, d.Events[0].LastSeen)
	})
	t.Run("late, then a blind window holds its interruption back", func(t *testing.T) {
		d := decide(input{Claim: fresh, Policy: base, Now: warnAt})
		c := deadline.Claim{Device: "d", State: d.Ack.State, HeldBack: true}
		d = decide(input{Claim: c, Policy: base, Now: due})
		require.Equal(t, reasonHeldBack, d.Reason)
		require.Empty(t, d.Events)
		require.WithinDuration(t, due.Add(heldRecheck), d.Ack.Next, 0)
		require.Equal(t, deadline.HoldLate, d.Ack.State.Hold, "still late: a recovery is still reported")
	})
	t.Run("warning inside a quiet interval: no late; its deadline judged when it comes", func(t *testing.T) {
		pol := quietPolicy(t, 10*time.Minute, `[{times: [{start_time: "00:00", end_time: "00:36"}]}]`)
		pol.WarnAfter = 4 * time.Minute
		d := decide(input{Claim: fresh, Policy: pol, Now: warnAt})
		require.Equal(t, reasonQuiet, d.Reason)
		require.Empty(t, d.Events)
		require.Equal(t, deadline.HoldQuiet, d.Ack.State.Hold)
		require.WithinDuration(t, due, d.Ack.Next, 0, "its deadline, not quiet any more")
		d = decide(input{Claim: deadline.Claim{Device: "d", State: d.Ack.State}, Policy: pol, Now: due})
		require.Equal(t, reasonInterrupted, d.Reason)
		require.Equal(t, due, d.Events[0].Deadline)
		require.Equal(t, seen, d.Events[0].LastSeen)

		pol = quietPolicy(t, 10*time.Minute, `[{times: [{start_time: "00:00", end_time: "01:00"}]}]`)
		pol.WarnAfter = 4 * time.Minute
		d = decide(input{Claim: fresh, Policy: pol, Now: warnAt})
		d = decide(input{Claim: deadline.Claim{Device: "d", State: d.Ack.State}, Policy: pol, Now: due})
		require.Equal(t, reasonQuiet, d.Reason, "its deadline quiet too: moved as any quiet deadline")
		require.WithinDuration(t, time.Date(2026, 6, 10, 1, 10, 0, 0, time.UTC), d.Ack.Next, 0, "the interval's end + timeout")
	})
	t.Run("late, then the timeout falls in a quiet interval: deferred, still late", func(t *testing.T) {
		pol := quietPolicy(t, 10*time.Minute, `[{times: [{start_time: "00:38", end_time: "01:00"}]}]`)
		pol.WarnAfter = 4 * time.Minute
		d := decide(input{Claim: fresh, Policy: pol, Now: warnAt})
		require.Equal(t, reasonLate, d.Reason)
		d = decide(input{Claim: deadline.Claim{Device: "d", State: d.Ack.State}, Policy: pol, Now: due})
		require.Equal(t, reasonQuiet, d.Reason)
		require.Empty(t, d.Events)
		require.Equal(t, deadline.HoldLate, d.Ack.State.Hold)
		moved := time.Date(2026, 6, 10, 1, 10, 0, 0, time.UTC)
		require.WithinDuration(t, moved, d.Ack.Next, 0)
		d = decide(input{Claim: deadline.Claim{Device: "d", State: d.Ack.State}, Policy: pol, Now: moved})
		require.Equal(t, reasonInterrupted, d.Reason)
		require.Equal(t, moved, d.Events[0].Deadline)
	})
	t.Run("late, then its group may become an outage: it waits from its deadline and stays late", func(t *testing.T) {
		d := decide(input{Claim: fresh, Policy: base, Now: warnAt})
		late := d.Ack.State
		d = decide(input{Claim: deadline.Claim{Device: "d", State: late}, Policy: base, GroupWait: 5 * time.Second, Now: due.Add(time.Second)})
		require.Equal(t, reasonGroupWait, d.Reason)
		require.Empty(t, d.Events)
		require.WithinDuration(t, due.Add(5*time.Second), d.Ack.Next, 0)
		require.Equal(t, deadline.HoldLate, d.Ack.State.Hold, "a recovery while it waits is still reported")
		back := decide(input{Claim: deadline.Claim{Device: "d", State: d.Ack.State}, Policy: base,
			Current: due.Add(2 * time.Second).Add(base.WarnAfter), Now: due.Add(2 * time.Second)})
		require.Equal(t, reasonRecovered, back.Reason)
		d = decide(input{Claim: deadline.Claim{Device: "d", State: d.Ack.State}, Policy: base, GroupWait: 5 * time.Second, Now: due.Add(5 * time.Second)})
		require.Equal(t, reasonInterrupted, d.Reason)
		require.Equal(t, due, d.Events[0].Deadline)
	})
	t.Run("silenced at the warning: late when the silence ends before the timeout", func(t *testing.T) {
		d := decide(input{Claim: fresh, Policy: base, SilencedUntil: warnAt.Add(time.Minute), Now: warnAt})
		require.Equal(t, reasonSilenced, d.Reason)
		require.Empty(t, d.Events)
		d = decide(input{Claim: deadline.Claim{Device: "d", State: d.Ack.State}, Policy: base, Now: warnAt.Add(time.Minute)})
		require.Equal(t, reasonLate, d.Reason)
		require.Equal(t, event.Late, d.Events[0].Kind)
	})
	t.Run("still silent a timeout after its parent's recovery: interrupted with its deadline, not its warning", func(t *testing.T) {
		parent := &deadline.Parent{ID: "gw", Known: true, LastSignal: due.Add(time.Minute)}
		st := deadline.State{Deadline: warnAt.UnixMilli(), Next: 1, Hold: deadline.HoldAfterParent, InterruptedAt: warnAt.UnixMilli()}
		d := decide(input{Claim: deadline.Claim{Device: "d", State: st}, Policy: base, Parent: parent, Now: due.Add(11 * time.Minute)})
		require.Equal(t, reasonInterrupted, d.Reason)
		require.Equal(t, due, d.Events[0].Deadline)
		require.Equal(t, seen, d.Events[0].LastSeen)
	})
	t.Run("a type without warn_after decides as before", func(t *testing.T) {
		pol := base
		pol.WarnAfter = 0
		c := deadline.Claim{Device: "d", Fresh: true, Record: "\x00claims:r:1", CommittedRepeat: time.Hour,
			State: deadline.State{Deadline: due.UnixMilli()}}
		d := decide(input{Claim: c, Policy: pol, Now: due})
		require.Equal(t, reasonInterrupted, d.Reason)
		require.True(t, d.Committed)
		require.Equal(t, seen, d.Events[0].LastSeen)
	})
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
