package deadline_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

func (f fixture) mark(t *testing.T, marks ...deadline.Mark) []deadline.MarkResult {
	t.Helper()
	res, err := f.Store.MarkEarlier(context.Background(), marks)
	require.NoError(t, err)
	return res
}

// An offline message moves a device's deadline earlier, and the claim carries its cause and the
// device's real last signal (not the moved deadline − timeout).
func TestOfflineMovesDeadlineEarlierWithCause(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		t0 := f.Clock.Now()
		f.Refresh(t, deadline.Signal{Device: "d1", Type: "sensor", Seen: t0}) // 10 min timeout
		f.Clock.Advance(time.Second)
		moved := f.Clock.Now().Add(10 * time.Second)
		res := f.mark(t, deadline.Mark{Device: "d1", At: f.Clock.Now(), Deadline: moved, Cause: deadline.CauseOffline})
		require.Equal(t, []deadline.MarkResult{deadline.MarkMoved}, res)
		f.Clock.Advance(9 * time.Second)
		require.Empty(t, f.ClaimAll(t, deadline.ClaimOptions{}).Claims, "not before the grace ends")
		f.Clock.Advance(time.Second)
		claims := f.ClaimAll(t, deadline.ClaimOptions{}).Claims
		require.Len(t, claims, 1)
		c := claims[0]
		require.Equal(t, moved.UnixMilli(), c.State.Deadline)
		require.Equal(t, "sensor", c.Type)
		require.NotNil(t, c.Cause)
		require.Equal(t, deadline.CauseOffline, c.Cause.Kind)
		require.Equal(t, t0.UnixMilli(), c.Cause.LastSeen.UnixMilli())
	})
}

// A message older than the device's last signal changes nothing; neither does one that would move the
// deadline later, nor one about a device already interrupted; presence never creates a device.
func TestMarkGuards(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		t0 := f.Clock.Now()
		f.Refresh(t, deadline.Signal{Device: "fresh", Type: "gateway", Seen: t0})
		res := f.mark(t,
			deadline.Mark{Device: "fresh", At: t0.Add(-time.Second), Deadline: t0, Cause: deadline.CauseReported, Own: true},
			deadline.Mark{Device: "fresh", At: t0, Deadline: t0.Add(time.Hour), Cause: deadline.CauseOffline},
			deadline.Mark{Device: "nobody", At: t0, Deadline: t0, Cause: deadline.CauseOffline})
		require.Equal(t, []deadline.MarkResult{deadline.MarkLate, deadline.MarkNotEarlier, deadline.MarkUnknown}, res)
		f.Clock.Advance(29 * time.Second)
		require.Empty(t, f.ClaimAll(t, deadline.ClaimOptions{}).Claims, "the deadline did not move")
		f.Clock.Advance(time.Second)
		claims := f.ClaimAll(t, deadline.ClaimOptions{}).Claims
		require.Len(t, claims, 1)
		require.Nil(t, claims[0].Cause, "silence")
		res = f.mark(t, deadline.Mark{Device: "fresh", At: f.Clock.Now(), Deadline: f.Clock.Now(), Cause: deadline.CauseReported, Own: true})
		require.Equal(t, []deadline.MarkResult{deadline.MarkOpen}, res)
		score := f.RDB.ZScore(context.Background(), f.Store.Keys().Deadlines(deadline.Slot("nobody", 8)), "nobody")
		require.ErrorIs(t, score.Err(), redis.Nil, "no entry for the unknown device")
	})
}

// A reported failure is due at once, carries its reason, and counts as the device's last word; a device
// Redis does not know is added by its own failure.
func TestReportedFailureIsDueAtOnce(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		t0 := f.Clock.Now()
		f.Refresh(t, deadline.Signal{Device: "pump", Type: "sensor", Seen: t0})
		f.Clock.Advance(time.Second)
		at := f.Clock.Now()
		res := f.mark(t,
			deadline.Mark{Device: "pump", At: at, Deadline: at, Cause: deadline.CauseReported, Reason: "stuck: valve", Own: true},
			deadline.Mark{Device: "newcomer", Type: "gateway", At: at, Deadline: at, Cause: deadline.CauseReported, Own: true})
		require.Equal(t, []deadline.MarkResult{deadline.MarkMoved, deadline.MarkMoved}, res)
		claims := f.ClaimAll(t, deadline.ClaimOptions{}).Claims
		require.ElementsMatch(t, []string{"pump", "newcomer"}, devices(claims))
		for _, c := range claims {
			require.NotNil(t, c.Cause, c.Device)
			require.Equal(t, deadline.CauseReported, c.Cause.Kind)
			require.Equal(t, at.UnixMilli(), c.Cause.LastSeen.UnixMilli())
			if c.Device == "pump" {
				require.Equal(t, "stuck: valve", c.Cause.Reason)
				require.Equal(t, "sensor", c.Type)
			} else {
				require.Equal(t, "gateway", c.Type)
			}
		}
		f.settle(t, claims...) // published
		// The device's view and the listing of incidents say why, as the incident's events do.
		ctx := context.Background()
		d, found, err := f.Store.Device(ctx, "pump")
		require.NoError(t, err)
		require.True(t, found)
		require.NotNil(t, d.Incident)
		require.NotNil(t, d.Cause)
		require.Equal(t, deadline.CauseReported, d.Cause.Kind)
		require.Equal(t, "stuck: valve", d.Cause.Reason)
		page, _, err := f.Store.List(ctx, deadline.ListOptions{Interrupted: true})
		require.NoError(t, err)
		require.Len(t, page, 2)
		for _, d := range page {
			require.NotNil(t, d.Cause, d.ID)
			require.Equal(t, deadline.CauseReported, d.Cause.Kind, d.ID)
		}
		// So does the re-read of open incidents (the Alertmanager re-sync), with the real last signal.
		incs, _, err := f.Store.ScanOpenIncidents(ctx, deadline.Slot("pump", 8), 0, 100)
		require.NoError(t, err)
		i := slices.IndexFunc(incs, func(i deadline.OpenIncident) bool { return i.Device == "pump" })
		require.GreaterOrEqual(t, i, 0)
		require.NotNil(t, incs[i].Cause)
		require.Equal(t, "stuck: valve", incs[i].Cause.Reason)
		require.Equal(t, at.UnixMilli(), incs[i].LastSeen().UnixMilli(), "the failure, not its deadline less the timeout")
	})
}

// A cause belongs to one incident: the device's next incident, begun by silence, carries none.
func TestCauseDoesNotOutliveItsIncident(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		t0 := f.Clock.Now()
		f.Refresh(t, deadline.Signal{Device: "d", Type: "gateway", Seen: t0})
		f.mark(t, deadline.Mark{Device: "d", At: t0, Deadline: t0.Add(time.Second), Cause: deadline.CauseOffline})
		// The device signals again before the grace ends: no incident; its later silence has no cause.
		f.Refresh(t, deadline.Signal{Device: "d", Type: "gateway", Seen: t0.Add(500 * time.Millisecond)})
		f.Clock.Advance(31 * time.Second)
		claims := f.ClaimAll(t, deadline.ClaimOptions{}).Claims
		require.Len(t, claims, 1)
		require.Equal(t, t0.Add(30500*time.Millisecond).UnixMilli(), claims[0].State.Deadline)
		require.Nil(t, claims[0].Cause)
		n, err := f.RDB.HLen(context.Background(), f.Store.Keys().Causes(deadline.Slot("d", 8))).Result()
		require.NoError(t, err)
		require.Zero(t, n, "the stale cause was dropped by the claim")
		d, _, err := f.Store.Device(context.Background(), "d")
		require.NoError(t, err)
		require.NotNil(t, d.Incident)
		require.Nil(t, d.Cause, "an incident begun by silence shows no cause")
	})
}

// While hold-back holds a type's devices back for their grace after a blind window, a failure a device
// reported after the window ended is claimed at once (ClaimOptions.HeardAfter): no signal lost in the
// window can have overtaken it. One reported inside the window waits with the rest.
func TestReportedFailureHeardAfterTheWindowIsNotHeldBack(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		from := f.Clock.Now()
		to := from.Add(time.Second) // the window; sensors (10 min) are held until to + 10 min
		watermark := func(timeout time.Duration) time.Time {
			if timeout > 0 && f.Clock.Now().Before(to.Add(timeout)) {
				return from
			}
			return f.Clock.Now()
		}
		for _, dev := range []string{"inside", "after", "quiet"} {
			f.Refresh(t, deadline.Signal{Device: dev, Type: "sensor", Seen: from.Add(-time.Minute)})
		}
		f.Clock.Set(to.Add(2 * time.Second))
		res := f.mark(t,
			deadline.Mark{Device: "inside", At: from.Add(500 * time.Millisecond), Deadline: from.Add(500 * time.Millisecond),
				Cause: deadline.CauseReported, Own: true},
			deadline.Mark{Device: "after", At: to.Add(time.Second), Deadline: to.Add(time.Second), Cause: deadline.CauseReported,
				Reason: "probe broken", Own: true})
		require.Equal(t, []deadline.MarkResult{deadline.MarkMoved, deadline.MarkMoved}, res)

		require.Empty(t, f.ClaimAll(t, deadline.ClaimOptions{WatermarkFor: watermark}).Claims, "without HeardAfter both wait")
		claims := f.ClaimAll(t, deadline.ClaimOptions{WatermarkFor: watermark, HeardAfter: to}).Claims
		require.Len(t, claims, 1)
		require.Equal(t, "after", claims[0].Device)
		require.Equal(t, to.Add(time.Second).UnixMilli(), claims[0].State.Deadline)
		require.NotNil(t, claims[0].Cause)
		require.Equal(t, "probe broken", claims[0].Cause.Reason)
		require.Empty(t, f.ClaimAll(t, deadline.ClaimOptions{WatermarkFor: watermark, HeardAfter: to}).Claims, "inside waits for its grace")

		f.Clock.Set(to.Add(10 * time.Minute))
		claims = f.ClaimAll(t, deadline.ClaimOptions{WatermarkFor: watermark, HeardAfter: to}).Claims
		var got []string
		for _, c := range claims {
			got = append(got, c.Device)
		}
		// (after comes back too: its claim was never acknowledged, and its lease ran out.)
		require.Subset(t, got, []string{"inside", "quiet"}, "after the grace: the failure inside the window and the silent one")
	})
}

// Marks of one device in one batch apply in order, each seeing the one before: the script reads once and
// writes once per kind, and must not let a later mark judge a stale deadline.
func TestMarksOfOneDeviceInOneBatchApplyInOrder(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		t0 := f.Clock.Now()
		f.Refresh(t, deadline.Signal{Device: "pump", Type: "sensor", Seen: t0}) // 10 min timeout
		res := f.mark(t,
			deadline.Mark{Device: "pump", At: t0.Add(time.Second), Deadline: t0.Add(time.Second), Cause: deadline.CauseReported, Reason: "first", Own: true},
			deadline.Mark{Device: "pump", At: t0.Add(2 * time.Second), Deadline: t0.Add(3 * time.Second), Cause: deadline.CauseOffline},
			deadline.Mark{Device: "newcomer", At: t0.Add(time.Second), Deadline: t0.Add(time.Second), Cause: deadline.CauseReported, Own: true},
			deadline.Mark{Device: "newcomer", At: t0.Add(2 * time.Second), Deadline: t0.Add(500 * time.Millisecond), Cause: deadline.CauseOffline})
		require.Equal(t, []deadline.MarkResult{deadline.MarkMoved, deadline.MarkNotEarlier, deadline.MarkMoved, deadline.MarkMoved}, res,
			"pump's offline would move its failure's deadline later; newcomer's moves the one its failure created")

		pump, found, err := f.Store.Device(ctx, "pump")
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, t0.Add(time.Second).UnixMilli(), pump.Deadline.UnixMilli())
		newcomer, found, err := f.Store.Device(ctx, "newcomer")
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, t0.Add(500*time.Millisecond).UnixMilli(), newcomer.Deadline.UnixMilli())

		f.Clock.Advance(2 * time.Second)
		claims := f.ClaimAll(t, deadline.ClaimOptions{}).Claims
		require.ElementsMatch(t, []string{"pump", "newcomer"}, devices(claims))
		for _, c := range claims {
			require.NotNil(t, c.Cause, c.Device)
			if c.Device == "pump" {
				require.Equal(t, deadline.CauseReported, c.Cause.Kind)
				require.Equal(t, "first", c.Cause.Reason)
			} else {
				require.Equal(t, deadline.CauseOffline, c.Cause.Kind, "the last mark's cause")
			}
		}
	})
}
