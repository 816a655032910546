package alarm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/pkg/config"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
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
