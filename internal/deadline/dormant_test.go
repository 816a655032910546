package deadline_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// dormantIncident makes dev silent, claims it and acknowledges it as exhausted: dormant until recovery.
func dormantIncident(t *testing.T, f fixture, dev string) deadline.Claim {
	t.Helper()
	c := claimOne(t, f, dev)
	st := c.State
	st.Next, st.Exhausted = 3, true
	a := reschedule(c, st, time.Time{})
	a.Dormant = true
	require.Equal(t, []bool{true}, f.ack(t, a))
	return c
}

// backWithoutProbe writes what the first round trip of a gateway signal of dev writes, its deadline, as
// if the process died before the recovery probe.
func backWithoutProbe(t *testing.T, f fixture, dev string) {
	t.Helper()
	ctx := context.Background()
	idx, err := f.Store.TypeIndex(ctx, "gateway")
	require.NoError(t, err)
	score := (f.Clock.Now().Add(30*time.Second).UnixMilli())*deadline.MaxTypes + int64(idx)
	slot := deadline.Slot(dev, f.Store.Slots())
	require.NoError(t, f.RDB.ZAddArgs(ctx, f.Store.Keys().Deadlines(slot), redis.ZAddArgs{GT: true,
		Members: []redis.Z{{Score: float64(score), Member: dev}}}).Err())
}

// The gap the sweep closes: after a lost probe a plain refresh of the same signal adds no member, so it
// probes nothing, and a dormant incident would wait for ever. A retry (RefreshRetry) probes every slot.
func TestRefreshRetryProbesWhatALostRoundTripWrote(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		dormantIncident(t, f, "d")
		f.Clock.Advance(time.Hour)
		backWithoutProbe(t, f, "d")
		sig := []deadline.Signal{{Device: "d", Type: "gateway", Seen: f.Clock.Now()}}
		f.Refresh(t, sig...)
		require.Empty(t, f.ClaimAll(t, deadline.ClaimOptions{}).Claims, "a plain refresh finds the device there and probes nothing")

		require.NoError(t, f.Store.RefreshRetry(ctx, sig))
		res := f.ClaimAll(t, deadline.ClaimOptions{})
		require.Len(t, res.Claims, 1, "the retry probed")
		require.True(t, res.Claims[0].State.Exhausted)
	})
}

func TestSweepMakesDormantIncidentsOfReturnedDevicesDue(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		dormantIncident(t, f, "back")
		dormantIncident(t, f, "still-silent")
		dormantIncident(t, f, "leased")
		f.Clock.Advance(time.Hour)
		// leased signals, its probe makes it due, and a claim leases it: being handled, never woken.
		f.Refresh(t, deadline.Signal{Device: "leased", Type: "gateway", Seen: f.Clock.Now()})
		require.Equal(t, []string{"leased"}, devices(f.ClaimAll(t, deadline.ClaimOptions{}).Claims))
		leaseEnd := f.Clock.Now().Add(30 * time.Second)
		backWithoutProbe(t, f, "back")
		f.Clock.Advance(time.Second)

		woken := 0
		for slot := range f.Store.Slots() {
			for cursor := uint64(0); ; {
				next, n, err := f.Store.SweepDormant(ctx, slot, cursor, 2)
				require.NoError(t, err)
				woken += n
				if cursor = next; cursor == 0 {
					break
				}
			}
		}
		require.Equal(t, 1, woken, "only the dormant incident whose device is back")
		d, _ := f.device(t, "back")
		require.Equal(t, f.Clock.Now(), d.NextAct, "due now")
		d, _ = f.device(t, "still-silent")
		require.True(t, d.NextAct.IsZero(), "still dormant")
		d, _ = f.device(t, "leased")
		require.Equal(t, leaseEnd, d.NextAct, "a lease is left as it is")

		res := f.ClaimAll(t, deadline.ClaimOptions{})
		require.Equal(t, []string{"back"}, devices(res.Claims))
		current, err := f.Store.CurrentDeadlines(ctx, res.Claims)
		require.NoError(t, err)
		require.True(t, current[0].After(res.Claims[0].State.DeadlineTime()), "the re-check sees it back")
	})
}

// BenchmarkSweepDormant runs full passes of the dormant sweep over 64 slots holding 100k dormant
// incidents (at most the fleet size) beside as many online devices, none of them back: the steady-state
// cost of the sweep. redis-µs/sweep is the time Redis spent in the sweep's commands per pass (INFO
// commandstats), what one pass takes from claims and refreshes.
func BenchmarkSweepDormant(b *testing.B) {
	srv := testenv.StartRedis(b)
	rdb := srv.Client(b)
	const slots = 64
	store, err := deadline.New(rdb, deadline.Options{Slots: slots, Timeout: timeoutOf})
	require.NoError(b, err)
	ctx := context.Background()
	n := min(100_000, benchDevices())
	preload(b, store, n, time.Now(), 0)
	dormant := float64(deadline.DormantAfter + time.Now().UnixMilli())
	pipe := rdb.Pipeline()
	for i := range n {
		dev := fmt.Sprintf("dormant-%08d", i)
		pipe.ZAdd(ctx, store.Keys().Alarms(deadline.Slot(dev, slots)), redis.Z{Score: dormant, Member: dev})
		if pipe.Len() == 4096 || i == n-1 {
			_, err := pipe.Exec(ctx)
			require.NoError(b, err)
		}
	}
	// Unpaced, a page of the sweeper's size (internal/sweep) at a time: the pass's own cost, not the pace
	// that spreads it over Redis's idle time.
	require.NoError(b, rdb.ConfigResetStat(ctx).Err())
	for b.Loop() {
		for slot := range slots {
			for cursor := uint64(0); ; {
				next, _, err := store.SweepDormant(ctx, slot, cursor, 1000)
				require.NoError(b, err)
				if cursor = next; cursor == 0 {
					break
				}
			}
		}
	}
	b.ReportMetric(float64(redisUsec(b, rdb))/float64(b.N), "redis-µs/sweep")
	b.ReportMetric(float64(n), "dormant")
}

// redisUsec is the time Redis spent running commands since its stats were reset (INFO commandstats).
func redisUsec(b *testing.B, rdb redis.UniversalClient) int64 {
	b.Helper()
	var total int64
	for name, s := range testenv.CommandStats(b, rdb) {
		// Not the sweep's: the benchmark's own INFO and CONFIG, and connection set-up (subcommands such as
		// client|setinfo).
		if name == "info" || name == "config" || strings.Contains(name, "|") {
			continue
		}
		total += s.Usec
	}
	return total
}
