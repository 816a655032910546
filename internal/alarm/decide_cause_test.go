package alarm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// An incident that began with a reported failure carries its cause and reason on every event, and its
// last_seen is the failure, not the moved deadline − timeout; its recovery measures the outage from it.
func TestDecideCarriesCause(t *testing.T) {
	failedAt := time.Date(2026, 11, 22, 10, 0, 12, 0, time.UTC)
	pol := config.Policy{Timeout: 30 * time.Second, RepeatEvery: time.Minute, MaxRepeats: 1}
	cause := &deadline.Cause{Kind: deadline.CauseReported, Reason: "valve stuck", Deadline: failedAt.UnixMilli(), LastSeen: failedAt}
	claim := deadline.Claim{Device: "pump", Type: "default", State: deadline.State{Deadline: failedAt.UnixMilli()}, Fresh: true, Cause: cause}

	now := failedAt.Add(20 * time.Millisecond)
	d := decide(input{Claim: claim, Policy: pol, Now: now})
	require.Len(t, d.Events, 1)
	e := d.Events[0]
	require.Equal(t, event.Interrupted, e.Kind)
	require.Equal(t, event.CauseReported, e.Cause)
	require.Equal(t, "valve stuck", e.Reason)
	require.Equal(t, failedAt, e.LastSeen)
	require.Equal(t, failedAt, e.Deadline)
	require.Equal(t, int64(20), e.SilentForMs)

	// The repeat (here the last, so exhausted follows) keeps the cause.
	claim.State, claim.Fresh = d.Ack.State, false
	d = decide(input{Claim: claim, Policy: pol, Now: now.Add(time.Minute)})
	require.Len(t, d.Events, 2)
	for _, e := range d.Events {
		require.Equal(t, event.CauseReported, e.Cause, e.Kind)
	}

	// The next ordinary signal: recovered, the outage measured from the failure.
	back := now.Add(2 * time.Minute)
	claim.State = d.Ack.State
	d = decide(input{Claim: claim, Policy: pol, Current: back.Add(pol.Timeout), Now: back})
	require.Len(t, d.Events, 1)
	require.Equal(t, event.Recovered, d.Events[0].Kind)
	require.Equal(t, failedAt, d.Events[0].LastSeen)
	require.Equal(t, back.Sub(failedAt).Milliseconds(), d.Events[0].SilentForMs)

	// Silence has no cause.
	d = decide(input{Claim: deadline.Claim{Device: "pump", State: deadline.State{Deadline: failedAt.UnixMilli()}, Fresh: true}, Policy: pol, Now: now})
	require.Empty(t, d.Events[0].Cause)
}

// A reported failure of a device whose type warns first is interrupted at once: a failure is no late
// device, so no `late` goes out before it.
func TestReportedFailureOfAWarnedTypeInterruptsAtOnce(t *testing.T) {
	failedAt := time.Date(2026, 11, 22, 10, 0, 12, 0, time.UTC)
	pol := config.Policy{Timeout: 30 * time.Second, WarnAfter: 10 * time.Second, RepeatEvery: time.Minute, MaxRepeats: 3}
	cause := &deadline.Cause{Kind: deadline.CauseReported, Reason: "door open", Deadline: failedAt.UnixMilli(), LastSeen: failedAt}
	claim := deadline.Claim{Device: "fridge", Type: "default", State: deadline.State{Deadline: failedAt.UnixMilli()}, Fresh: true, Cause: cause}

	d := decide(input{Claim: claim, Policy: pol, Now: failedAt.Add(5 * time.Millisecond)})
	require.Len(t, d.Events, 1)
	require.Equal(t, event.Interrupted, d.Events[0].Kind)
	require.Equal(t, event.CauseReported, d.Events[0].Cause)
	require.Equal(t, failedAt, d.Events[0].LastSeen)

	// Without the cause the same claim is a warning.
	claim.Cause = nil
	d = decide(input{Claim: claim, Policy: pol, Now: failedAt.Add(5 * time.Millisecond)})
	require.Len(t, d.Events, 1)
	require.Equal(t, event.Late, d.Events[0].Kind)
}

// A newer deadline set by a signal no newer than the reported failure is no recovery: decide drops that
// deadline and goes on with the incident; a signal after the failure is the recovery. For a scheduled
// type the signal's time is its recorded one, not its deadline − a timeout.
func TestDecideSignalOlderThanFailure(t *testing.T) {
	failedAt := time.Date(2026, 11, 22, 10, 0, 12, 0, time.UTC)
	pol := config.Policy{Timeout: 30 * time.Second, RepeatEvery: time.Minute}
	cause := &deadline.Cause{Kind: deadline.CauseReported, Reason: "valve stuck", Deadline: failedAt.UnixMilli(), LastSeen: failedAt}
	st := deadline.State{Deadline: failedAt.UnixMilli(), Next: 1, InterruptedAt: failedAt.UnixMilli()}
	claim := deadline.Claim{Device: "pump", Type: "default", State: st, Cause: cause}
	now := failedAt.Add(5 * time.Second)

	stale := failedAt.Add(-time.Second).Add(pol.Timeout) // a signal a second before the failure
	d := decide(input{Claim: claim, Policy: pol, Current: stale, Now: now})
	require.Empty(t, d.Events)
	require.Equal(t, deadline.Reschedule, d.Ack.Op)
	require.Equal(t, stale.UnixMilli(), d.Ack.DropDeadline)
	require.True(t, failedAt.Add(time.Minute).Equal(d.Ack.Next), "the next repeat, as if the signal had not come: %v", d.Ack.Next)

	fresh := failedAt.Add(time.Second).Add(pol.Timeout)
	d = decide(input{Claim: claim, Policy: pol, Current: fresh, Now: now})
	require.Len(t, d.Events, 1)
	require.Equal(t, event.Recovered, d.Events[0].Kind)
	require.Zero(t, d.Ack.DropDeadline)

	// A scheduled type: the deadline is the next expected time, the signal time is recorded.
	d = decide(input{Claim: claim, Policy: pol, Current: now.Add(time.Hour), Now: now,
		Seen: &deadline.SeenTimes{Latest: failedAt.Add(-time.Second)}})
	require.Empty(t, d.Events)
	require.Equal(t, now.Add(time.Hour).UnixMilli(), d.Ack.DropDeadline)
	d = decide(input{Claim: claim, Policy: pol, Current: now.Add(time.Hour), Now: now,
		Seen: &deadline.SeenTimes{Latest: failedAt.Add(time.Second)}})
	require.Equal(t, event.Recovered, d.Events[0].Kind)

	// An incident that began with silence (or offline) recovers at any newer deadline.
	offline := *cause
	offline.Kind = deadline.CauseOffline
	claim.Cause = &offline
	d = decide(input{Claim: claim, Policy: pol, Current: stale, Now: now})
	require.Equal(t, event.Recovered, d.Events[0].Kind)
}
