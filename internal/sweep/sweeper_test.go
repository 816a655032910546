package sweep_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/flaps"
	"github.com/heartbeatd/heartbeatd/internal/sweep"
)

// dormantIncident makes dev silent, claims it and acknowledges it as exhausted: dormant until recovery.
func dormantIncident(t *testing.T, f fixture, dev string) {
	t.Helper()
	c := claimOne(t, f, dev)
	st := c.State
	st.Next, st.Exhausted = 3, true
	ack(t, f, c, deadline.Ack{Device: dev, Slot: c.Slot, Op: deadline.Reschedule, Claimed: c.State.Deadline, State: st, Dormant: true})
	require.True(t, nextAct(t, f, dev).IsZero(), "dormant")
}

// backWithoutProbe writes what the first round trip of a gateway signal of dev writes, its deadline, as
// if the process died before the recovery probe: the score a gateway signal of another device at the
// same time is given.
func backWithoutProbe(t *testing.T, f fixture, dev string) {
	t.Helper()
	ctx := context.Background()
	twin := "twin-of-" + dev
	f.Refresh(t, deadline.Signal{Device: twin, Type: "gateway", Seen: f.Clock.Now()})
	score, err := f.RDB.ZScore(ctx, f.Store.Keys().Deadlines(deadline.Slot(twin, f.Store.Slots())), twin).Result()
	require.NoError(t, err)
	require.NoError(t, f.RDB.ZAddArgs(ctx, f.Store.Keys().Deadlines(deadline.Slot(dev, f.Store.Slots())), redis.ZAddArgs{GT: true,
		Members: []redis.Z{{Score: score, Member: dev}}}).Err())
}

// TestSweeperRunsOverOwnedSlots: the sweeper makes due, every Every until stopped, the dormant incidents
// of the slots it is given whose device is back without its recovery probe; a slot it does not own is
// left to its owner.
func TestSweeperRunsOverOwnedSlots(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		owned := deadline.Slot("d", f.Store.Slots())
		other := "e"
		for i := 0; deadline.Slot(other, f.Store.Slots()) == owned; i++ {
			other = fmt.Sprint("e", i)
		}
		dormantIncident(t, f, "d")
		dormantIncident(t, f, other)
		f.Clock.Advance(time.Hour)
		backWithoutProbe(t, f, "d")
		backWithoutProbe(t, f, other)
		w := sweeper(f, sweep.Options{Slots: func() []int { return []int{owned} }, Every: 10 * time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { _ = w.Run(ctx) })
		defer func() { cancel(); wg.Wait() }()
		require.Eventually(t, func() bool { return !nextAct(t, f, "d").IsZero() }, 10*time.Second, 5*time.Millisecond)
		cancel()
		wg.Wait()
		require.True(t, nextAct(t, f, other).IsZero(), "another replica's slot: left to its sweeper")
	})
}

// TestSweepRecoversParkedClaimsOfSignalledDevices: a pass makes due the parked claim of a device that
// signalled again (the probe does not reach the dead set), so its recovery is reported without an
// operator's requeue; a device still silent stays parked.
func TestSweepRecoversParkedClaimsOfSignalledDevices(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		for _, dev := range []string{"back", "silent"} {
			c := claimOne(t, f, dev)
			st := c.State
			st.Failures, st.Reason = 3, "refused: too large"
			ack(t, f, c, deadline.Ack{Device: dev, Slot: c.Slot, Op: deadline.Park, Claimed: c.State.Deadline, State: st})
		}
		f.Clock.Advance(time.Minute)
		f.Refresh(t, deadline.Signal{Device: "back", Type: "gateway", Seen: f.Clock.Now()})
		require.Empty(t, f.ClaimAll(t, deadline.ClaimOptions{}).Claims, "parked: the probe does not reach it")

		require.NoError(t, sweeper(f, sweep.Options{}).Pass(ctx))
		res := f.ClaimAll(t, deadline.ClaimOptions{})
		require.Len(t, res.Claims, 1)
		require.Equal(t, "back", res.Claims[0].Device, "its recovery is due at once")
		parked, err := f.Store.ParkedClaims(ctx, 10)
		require.NoError(t, err)
		require.Len(t, parked, 1)
		require.Equal(t, "silent", parked[0].Device, "still silent: still parked")
	})
}

// TestSweepForgetsTheLongSilentUnregistered: with retention on, a pass forgets the devices silent longer
// than ForgetAfter that are not registered and tells Forgotten which; a registered one stays.
func TestSweepForgetsTheLongSilentUnregistered(t *testing.T) {
	eachFixture(t, 4, func(t *testing.T, f fixture) {
		ctx := context.Background()
		f.Refresh(t, deadline.Signal{Device: "gone", Type: "gateway", Seen: f.Clock.Now()},
			deadline.Signal{Device: "kept", Type: "gateway", Seen: f.Clock.Now()})
		_, _, err := f.Store.Register(ctx, []string{"kept"}, []deadline.Registration{{Type: "gateway"}}, []string{""})
		require.NoError(t, err)
		f.Clock.Advance(time.Hour)
		require.Len(t, f.ClaimAll(t, deadline.ClaimOptions{Lease: time.Minute}).Claims, 2)

		var forgotten []string
		w := sweeper(f, sweep.Options{ForgetAfter: 30 * time.Minute,
			Forgotten: func(_ context.Context, devices []string) { forgotten = append(forgotten, devices...) }})
		require.NoError(t, w.Pass(ctx))
		require.Equal(t, []string{"gone"}, forgotten)
		_, found, err := f.Store.Device(ctx, "gone")
		require.NoError(t, err)
		require.False(t, found, "forgotten: no incident, no deadline")
		_, found, err = f.Store.Device(ctx, "kept")
		require.NoError(t, err)
		require.True(t, found, "a registered device is expected, never forgotten")
	})
}

// TestSweepPrunesFlapHistoriesPastTheWindow: the sweep deletes the histories whose newest interruption is
// older than the longest flapping window, a page per slot and pass, and keeps the others (one whose
// older interruptions are past the window is judged by its newest).
func TestSweepPrunesFlapHistoriesPastTheWindow(t *testing.T) {
	eachFixture(t, 4, func(t *testing.T, f fixture) {
		ctx := context.Background()
		now := f.Clock.Now()
		const stale = 3000 // more per slot than a listpack holds (512), so an HSCAN step reads about a page
		var updates []flaps.Update
		for i := range stale {
			dev := fmt.Sprint("gone-", i)
			updates = append(updates, flaps.Update{Device: dev, Slot: deadline.Slot(dev, 4),
				Times: []int64{now.Add(-3 * time.Hour).UnixMilli(), now.Add(-2 * time.Hour).UnixMilli()}})
		}
		kept := map[string][]int64{
			"recent":         {now.Add(-10 * time.Minute).UnixMilli()},
			"newest-counts":  {now.Add(-5 * time.Hour).UnixMilli(), now.Add(-30 * time.Minute).UnixMilli()},
			"just-in-window": {now.Add(-time.Hour + time.Second).UnixMilli()},
		}
		for dev, times := range kept {
			updates = append(updates, flaps.Update{Device: dev, Slot: deadline.Slot(dev, 4), Times: times})
		}
		require.NoError(t, f.Store.Flaps().Record(ctx, updates))
		var all []flaps.Device
		for _, u := range updates {
			all = append(all, flaps.Device{ID: u.Device, Slot: u.Slot})
		}
		want := make([]bool, len(all))
		for i := range want {
			want[i] = true
		}
		histories := func() int64 {
			got, err := f.Store.Flaps().History(ctx, all, want)
			require.NoError(t, err)
			var n int64
			for _, h := range got {
				if h != nil {
					n++
				}
			}
			return n
		}
		require.EqualValues(t, stale+len(kept), histories())

		w := sweeper(f, sweep.Options{Page: 20, FlapWindow: func() time.Duration { return time.Hour }})
		require.NoError(t, w.Pass(ctx))
		left := histories()
		require.Less(t, left, int64(stale+len(kept)), "the first pass pruned some")
		require.Greater(t, left, int64(stale/2), "a pass prunes about a page per slot, not every history")
		for pass := 0; histories() > int64(len(kept)); pass++ {
			require.Less(t, pass, 200, "the passes go on where the last one stopped")
			require.NoError(t, w.Pass(ctx))
		}
		got, err := f.Store.Flaps().History(ctx, all[stale:], want[stale:])
		require.NoError(t, err)
		for i, c := range all[stale:] {
			require.Equal(t, kept[c.ID], got[i], c.ID)
		}
	})
}
