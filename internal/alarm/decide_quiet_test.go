package alarm

import (
	"testing"
	"time"

	"github.com/prometheus/alertmanager/timeinterval"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
	"github.com/heartbeatd/heartbeatd/pkg/schedule"
)

func quietPolicy(t *testing.T, timeout time.Duration, ranges string) config.Policy {
	t.Helper()
	var r []timeinterval.TimeInterval
	require.NoError(t, yaml.Unmarshal([]byte(ranges), &r))
	cal := schedule.NewCalendar([]*schedule.Interval{{Name: "q", Ranges: r}}, nil)
	return config.Policy{Timeout: timeout, RepeatEvery: time.Hour, Calendar: cal}
}

// A moved deadline that falls in another quiet spell moves again; the interruption that finally goes out
// carries the last moved deadline and the real last signal.
func TestDecideQuietDeferralChains(t *testing.T) {
	pol := quietPolicy(t, 10*time.Minute, `[{times: [{start_time: "00:00", end_time: "01:00"}, {start_time: "01:05", end_time: "02:00"}]}]`)
	day := time.Date(2026, 6, 10, 0, 0, 0, 0, time.UTC)
	clock := testenv.NewClock(day.Add(30 * time.Minute)) // the deadline passes at 00:30
	claim := deadline.Claim{Device: "d", Fresh: true, State: deadline.State{Deadline: clock.Now().UnixMilli()}}

	d := decide(input{Claim: claim, Policy: pol, Now: clock.Now()})
	require.Equal(t, reasonQuiet, d.Reason)
	require.Empty(t, d.Events)
	require.Equal(t, day.Add(time.Hour+10*time.Minute), d.Ack.Next, "01:00 + timeout")

	clock.Set(d.Ack.Next) // 01:10 is inside the second spell
	claim.Fresh, claim.State = false, d.Ack.State
	d = decide(input{Claim: claim, Policy: pol, Now: clock.Now()})
	require.Equal(t, reasonQuiet, d.Reason)
	require.Equal(t, day.Add(2*time.Hour+10*time.Minute), d.Ack.Next, "02:00 + timeout")

	clock.Set(d.Ack.Next)
	claim.State = d.Ack.State
	d = decide(input{Claim: claim, Policy: pol, Now: clock.Now()})
	require.Equal(t, reasonInterrupted, d.Reason)
	require.Len(t, d.Events, 1)
	e := d.Events[0]
	require.Equal(t, event.Interrupted, e.Kind)
	require.Equal(t, day.Add(2*time.Hour+10*time.Minute), e.Deadline)
	require.Equal(t, day.Add(20*time.Minute), e.LastSeen, "deadline 00:30 − timeout")
	require.Equal(t, deadline.HoldNone, d.Ack.State.Hold, "an incident like any other from here")
}

// In a named location the interval ends at its local end on the night clocks go forward.
func TestDecideQuietEndAcrossDST(t *testing.T) {
	pol := quietPolicy(t, 5*time.Minute, `[{times: [{start_time: "01:00", end_time: "04:00"}], location: Europe/Berlin}]`)
	clock := testenv.NewClock(time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC)) // 01:30 CET
	claim := deadline.Claim{Device: "d", Fresh: true, State: deadline.State{Deadline: clock.Now().UnixMilli()}}
	d := decide(input{Claim: claim, Policy: pol, Now: clock.Now()})
	require.Equal(t, reasonQuiet, d.Reason)
	require.Equal(t, time.Date(2026, 3, 29, 2, 5, 0, 0, time.UTC), d.Ack.Next, "04:00 CEST is 02:00 UTC, + 5m")
}

// Outside the quiet hours nothing changes: a type with a calendar is interrupted as one without.
func TestDecideNotQuietIsUnchanged(t *testing.T) {
	pol := quietPolicy(t, time.Minute, `[{times: [{start_time: "00:00", end_time: "01:00"}]}]`)
	now := time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC)
	claim := deadline.Claim{Device: "d", Fresh: true, State: deadline.State{Deadline: now.UnixMilli()}}
	with := decide(input{Claim: claim, Policy: pol, Now: now})
	pol.Calendar = nil
	without := decide(input{Claim: claim, Policy: pol, Now: now})
	require.Equal(t, without, with)
}

// A deferred incident that comes due while a blind window may hide the device's signals waits for the
// hold-back as a fresh claim would: no interrupted for a device whose backlog is still unread.
func TestDecideDeferredIncidentWaitsForTheHoldBack(t *testing.T) {
	pol := quietPolicy(t, 10*time.Minute, `[{times: [{start_time: "00:00", end_time: "01:00"}]}]`)
	day := time.Date(2026, 6, 10, 0, 0, 0, 0, time.UTC)
	claim := deadline.Claim{Device: "d", Fresh: true, State: deadline.State{Deadline: day.Add(30 * time.Minute).UnixMilli()}}
	d := decide(input{Claim: claim, Policy: pol, Now: day.Add(30 * time.Minute)})
	require.Equal(t, reasonQuiet, d.Reason)
	moved := day.Add(time.Hour + 10*time.Minute)

	claim.Fresh, claim.State, claim.HeldBack = false, d.Ack.State, true
	d = decide(input{Claim: claim, Policy: pol, Now: moved})
	require.Equal(t, reasonHeldBack, d.Reason)
	require.Empty(t, d.Events)
	require.Equal(t, moved.Add(heldRecheck), d.Ack.Next)
	require.Equal(t, deadline.HoldQuiet, d.Ack.State.Hold, "still deferred")

	// The window is over and the device is still silent.
	claim.State, claim.HeldBack = d.Ack.State, false
	d = decide(input{Claim: claim, Policy: pol, Now: moved.Add(time.Minute)})
	require.Equal(t, reasonInterrupted, d.Reason)

	// After its parent's recovery, the same.
	after := deadline.Claim{Device: "d", HeldBack: true, State: deadline.State{Deadline: day.UnixMilli(), Next: 1, Hold: deadline.HoldAfterParent}}
	d = decide(input{Claim: after, Policy: config.Policy{Timeout: time.Minute}, Now: day.Add(time.Hour),
		Parent: &deadline.Parent{ID: "gw", Known: true, LastSignal: day.Add(59 * time.Minute)}})
	require.Equal(t, reasonHeldBack, d.Reason)
	require.Empty(t, d.Events)
}
