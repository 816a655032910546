package alarm

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// fail records a failure device reports at the given offset from t0, as the ingest chain writes it.
func (f *fixture) fail(device string, at time.Duration, reason string) {
	f.t.Helper()
	res, err := f.Store.MarkEarlier(context.Background(), []deadline.Mark{{Device: device, At: f.T0.Add(at), Deadline: f.T0.Add(at),
		Cause: deadline.CauseReported, Reason: reason, Own: true}})
	require.NoError(f.t, err)
	require.Equal(f.t, []deadline.MarkResult{deadline.MarkMoved}, res)
}

// A signal whose own time is older than the failure its device reported (replayed from Kafka, or
// overtaken on its way) is no recovery: it neither closes the failure's incident nor, before the failure
// is claimed, moves its deadline on. A signal newer than the failure is the recovery, as always.
func TestSignalOlderThanAFailureIsNoRecovery(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		// The default type: timeout 10s, repeat_every 1m.
		f.signal("pump", "", 0)
		f.signal("valve", "", 0)
		f.signal("gate", "", 0)
		f.fail("pump", 2*time.Second, "probe broken")
		f.fail("valve", 2*time.Second, "stuck")
		f.fail("gate", 2*time.Second, "jammed")

		// Before its claim: valve's failure is overtaken by a heartbeat sent before it (1s), gate's by one
		// sent after it (3s), the recovery.
		f.Clock.Set(f.T0.Add(1500 * time.Millisecond))
		f.signal("valve", "", time.Second)
		f.signal("gate", "", 3*time.Second)
		require.Equal(t, []string{"pump interrupted 0", "valve interrupted 0"}, f.at(3*time.Second),
			"valve's failure stands; gate recovered before it was claimed")
		evs := eventsOf(t, f, "valve", 2)
		require.Len(t, evs, 1)
		require.Equal(t, event.CauseReported, evs[0].Cause)
		require.Equal(t, "stuck", evs[0].Reason)
		require.Equal(t, f.T0.Add(2*time.Second).UTC(), evs[0].Deadline)

		// After its claim, and a claim since (which finds the failure claimed and is done with it):
		// pump's incident is open; a heartbeat from before the failure comes.
		require.Empty(t, f.at(3500*time.Millisecond))
		f.Clock.Set(f.T0.Add(4 * time.Second))
		f.signal("pump", "", time.Second)
		require.Empty(t, f.at(4*time.Second), "a signal older than the failure reports no recovery")
		dev, _, err := f.Store.Device(ctx, "pump")
		require.NoError(t, err)
		require.NotNil(t, dev.Incident, "pump's incident is still open")
		require.True(t, dev.Deadline.IsZero(), "the stale signal's deadline is gone: %v", dev.Deadline)
		require.Equal(t, []string{"gate interrupted 0"}, f.at(15*time.Second),
			"gate was silent since 3s; pump's stale deadline (11s) does not come due as a new silence")
		require.Equal(t, []string{"pump alarm 1", "valve alarm 1"}, f.at(63*time.Second), "the repeats go on")

		// A signal newer than the failure is the recovery.
		f.signal("pump", "", 64*time.Second)
		require.Equal(t, []string{"pump recovered 0"}, f.at(64*time.Second))
	})
}
