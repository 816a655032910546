package holdback

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// holdBackT0 is where the hold-back tests' clocks start.
var holdBackT0 = time.UnixMilli(1_763_800_000_000)

// holdBackRedis is where a hold-back test starts: a Redis of its own and a clock at holdBackT0.
func holdBackRedis(t *testing.T) (*redis.Client, *testenv.Clock) {
	t.Helper()
	return testenv.StartRedis(t).Client(t), testenv.NewClock(holdBackT0)
}

// newReplicaTracker is replica id's hold-back on rdb (key prefix "hb"): grace 10s, max_hold_back 1m,
// time from now; mod changes the rest.
func newReplicaTracker(rdb redis.UniversalClient, id string, now func() time.Time, mod func(*Options)) *Tracker {
	opts := Options{Client: rdb, KeyPrefix: "hb", ReplicaID: id, Now: now,
		Grace: func() time.Duration { return 10 * time.Second }, MaxHoldBack: time.Minute}
	if mod != nil {
		mod(&opts)
	}
	return New(opts)
}

// kafkaReplicaTracker is replica id's hold-back whose one source, "kafka", reports trouble: a grace of
// two hours (a meter's) bounded by a max_hold_back of ten minutes.
func kafkaReplicaTracker(rdb redis.UniversalClient, id string, now func() time.Time, trouble *atomic.Pointer[ProbeTrouble]) *Tracker {
	return newReplicaTracker(rdb, id, now, func(o *Options) {
		o.Grace = func() time.Duration { return 2 * time.Hour }
		o.MaxHoldBack = 10 * time.Minute
		o.Probes = []Probe{troubleProbe("kafka", trouble)}
	})
}

// ticks runs one tick of each hold-back, in order.
func ticks(t *testing.T, hbs ...*Tracker) {
	t.Helper()
	for _, h := range hbs {
		require.NoError(t, h.tick(context.Background()))
	}
}

// TestHoldBackRedisOutage: while Redis refuses writes no signal is stored, so deadlines that pass during
// the outage must not be claimed when Redis returns, before the sources' backlog is stored: the hold
// starts at the last successful share, applies at once (no tick needed after Redis is back), and ends
// a grace after Redis takes writes again.
func TestHoldBackRedisOutage(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := srv.Client(t)
	clk := testenv.NewClock(holdBackT0)
	at := func(d time.Duration) time.Time { clk.Set(holdBackT0.Add(d)); return clk.Now() }
	var mu sync.Mutex
	var changes []bool
	reg := prometheus.NewRegistry()
	hb := newReplicaTracker(rdb, "r1", clk.Now, func(o *Options) {
		o.OnChange = func(active bool) { mu.Lock(); defer mu.Unlock(); changes = append(changes, active) }
		o.Registerer = reg
	})
	heldBack := func() float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "heartbeatd_hold_back" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("heartbeatd_hold_back is not registered")
		return 0
	}
	ctx := context.Background()
	require.NoError(t, hb.Start(ctx))
	require.NoError(t, hb.tick(ctx))
	require.False(t, hb.Status().Active)

	srv.Stop(t)
	at(5 * time.Second)
	require.Error(t, hb.tick(ctx))
	st := hb.Status()
	require.True(t, st.Active, "Redis refusing writes is an outage of ours")
	require.Equal(t, holdBackT0, st.Since, "the hold starts when Redis last took a write")
	require.Equal(t, redisUnreachable, st.Reason)
	require.Equal(t, 1.0, heldBack(), "heartbeatd_hold_back shows it")
	require.Equal(t, holdBackT0, hb.Watermark(at(6*time.Second)))

	srv.Start(t)
	require.Equal(t, holdBackT0, hb.Watermark(at(20*time.Second)), "held before any tick saw Redis back")
	require.NoError(t, hb.tick(ctx))
	require.NoError(t, hb.tick(ctx))
	st = hb.Status()
	require.True(t, st.Active, "grace after Redis is back")
	require.Equal(t, holdBackT0.Add(30*time.Second), st.Until)
	require.Equal(t, holdBackT0, hb.Watermark(at(29*time.Second)))

	at(30*time.Second + time.Millisecond)
	require.NoError(t, hb.tick(ctx))
	require.False(t, hb.Status().Active, "the hold ends after the grace")
	require.Equal(t, clk.Now(), hb.Watermark(clk.Now()))
	require.Equal(t, 0.0, heldBack())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []bool{true, false}, changes)
}

// TestHoldBackRedisThatLostAcknowledgedWrites: a Redis that comes back from an older copy of its data (a
// snapshot, or an append-only file synced once a second) has lost writes it acknowledged, the deadlines
// the signals of that span moved among them: a device's deadline may be rolled back to before the span.
// The tick notices its own entry older than the last one Redis took, and holds back from the copy's time
// a grace past now, with no outage between two ticks to tell.
func TestHoldBackRedisThatLostAcknowledgedWrites(t *testing.T) {
	rdb, clk := holdBackRedis(t)
	at := func(d time.Duration) time.Time { clk.Set(holdBackT0.Add(d)); return clk.Now() }
	hb := newReplicaTracker(rdb, "r1", clk.Now, nil)
	ctx := context.Background()
	require.NoError(t, hb.Start(ctx))
	require.NoError(t, rdb.Save(ctx).Err(), "the copy Redis will come back from")
	for _, d := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} {
		at(d)
		require.NoError(t, hb.tick(ctx))
	}
	require.False(t, hb.Status().Active)

	require.NoError(t, rdb.Do(ctx, "DEBUG", "RELOAD", "NOSAVE").Err(), "Redis loads the copy: 3 s of writes gone")
	at(4 * time.Second)
	require.NoError(t, hb.tick(ctx))
	st := hb.Status()
	require.True(t, st.Active, "writes Redis acknowledged are gone")
	require.Equal(t, holdBackT0, st.Since, "held from the copy's time")
	require.Contains(t, st.Reason, "redis lost the writes")
	require.Equal(t, holdBackT0, hb.Watermark(at(13*time.Second)), "a grace after it was noticed")
	after := at(14*time.Second + time.Millisecond)
	require.NoError(t, hb.tick(ctx))
	require.Equal(t, after, hb.Watermark(after), "the hold ends a grace after it was noticed")
}

// TestHoldBackRefusedWritesHoldAtOnce: a Redis outage between two ticks is seen only by the writes it
// refused. The scanners may reach Redis again before the next tick and before the refused signals are
// written: the refused writes hold detection back at once, from their start, and keep holding until a
// tick finds writes taken again, and a grace after that.
func TestHoldBackRefusedWritesHoldAtOnce(t *testing.T) {
	rdb, clk := holdBackRedis(t)
	at := func(d time.Duration) time.Time { clk.Set(holdBackT0.Add(d)); return clk.Now() }
	var refusedSince atomic.Int64 // unix ms; 0 while writes succeed
	hb := newReplicaTracker(rdb, "r1", clk.Now, func(o *Options) {
		o.WriteFailure = func() time.Time {
			if ms := refusedSince.Load(); ms != 0 {
				return time.UnixMilli(ms)
			}
			return time.Time{}
		}
	})
	ctx := context.Background()
	require.NoError(t, hb.Start(ctx))
	at(time.Second)
	require.NoError(t, hb.tick(ctx))
	require.Equal(t, clk.Now(), hb.Watermark(clk.Now()))

	refusedSince.Store(holdBackT0.Add(1500 * time.Millisecond).UnixMilli())
	require.Equal(t, holdBackT0.Add(time.Second), hb.Watermark(at(3*time.Second)),
		"held at once, from the last share before the refused writes")
	require.NoError(t, hb.tick(ctx))
	st := hb.Status()
	require.True(t, st.Active, "a tick that reaches Redis keeps the window open while writes are refused")
	require.Equal(t, redisRefusedWrites, st.Reason)
	require.True(t, st.Until.IsZero())

	refusedSince.Store(0)
	require.Equal(t, holdBackT0.Add(time.Second), hb.Watermark(at(4*time.Second)), "held until a tick closes the window")
	require.NoError(t, hb.tick(ctx))
	st = hb.Status()
	require.True(t, st.Active, "grace after the writes are taken again")
	require.Equal(t, holdBackT0.Add(14*time.Second), st.Until)
	at(14*time.Second + time.Millisecond)
	require.NoError(t, hb.tick(ctx))
	require.False(t, hb.Status().Active)
	require.Equal(t, clk.Now(), hb.Watermark(clk.Now()))
}

// TestHoldBackRecordsWriteTroubleNoOneSaw: a Redis that froze blocked every loop that reads the writes'
// failure, the scanners' claims and the ticks alike, and its writes were answered the moment it woke,
// before the signals that queued meanwhile were written. The span of that trouble still holds detection
// back, from its start until a grace after its end, once; a span already recorded is not again.
func TestHoldBackRecordsWriteTroubleNoOneSaw(t *testing.T) {
	var from, to atomic.Int64 // unix ms of the last trouble; 0: none
	hb, at, _ := startedHoldBack(t, func(o *Options) {
		o.WriteTrouble = func() (time.Time, time.Time) {
			if to.Load() == 0 {
				return time.Time{}, time.Time{}
			}
			return time.UnixMilli(from.Load()), time.UnixMilli(to.Load())
		}
	})
	ctx := context.Background()
	now := at(time.Second)
	require.NoError(t, hb.tick(ctx))
	require.Equal(t, now, hb.Watermark(now))

	from.Store(holdBackT0.Add(2 * time.Second).UnixMilli())
	to.Store(holdBackT0.Add(8 * time.Second).UnixMilli())
	require.Equal(t, holdBackT0.Add(time.Second), hb.Watermark(at(8100*time.Millisecond)),
		"held at the first look, from the last share before the trouble")
	require.NoError(t, hb.tick(ctx))
	st := hb.Status()
	require.True(t, st.Active)
	require.Equal(t, redisRefusedWrites, st.Reason)
	require.Equal(t, holdBackT0.Add(18*time.Second), st.Until, "a grace after the trouble ended")

	now = at(18*time.Second + time.Millisecond)
	require.NoError(t, hb.tick(ctx))
	require.False(t, hb.Status().Active)
	require.Equal(t, now, hb.Watermark(now), "the same span is recorded once")
}

// slowTicks starts replica r1's hold-back on a fresh Redis (mod changes its options); its next tick
// waits as long as wait holds after the tick's start, and at sets the clock to T0 + d.
func startedHoldBack(t *testing.T, mod func(*Options)) (hb *Tracker, at func(time.Duration) time.Time, wait *atomic.Int64) {
	t.Helper()
	rdb, clk := holdBackRedis(t)
	wait = new(atomic.Int64)
	hb = newReplicaTracker(rdb, "r1", clk.Now, func(o *Options) {
		if mod != nil {
			mod(o)
		}
		// The probes are read first in a tick: this one stands for the wait that follows.
		o.Probes = []Probe{{Name: "slow", Trouble: func(time.Time) ProbeTrouble {
			clk.Advance(time.Duration(wait.Swap(0)))
			return ProbeTrouble{}
		}}}
	})
	require.NoError(t, hb.Start(context.Background()))
	return hb, func(d time.Duration) time.Time { clk.Set(holdBackT0.Add(d)); return clk.Now() }, wait
}

// TestHoldBackTickThatWaitedClosesWhenItReturns: a tick that waited seconds on a frozen Redis closes
// the Redis window at the time it returned: closed at its start, the grace would already be over and the
// signals still queued behind the freeze could be overtaken by a claim.
func TestHoldBackTickThatWaitedClosesWhenItReturns(t *testing.T) {
	var refusedSince atomic.Int64 // unix ms; 0 while writes succeed
	hb, at, wait := startedHoldBack(t, func(o *Options) {
		o.WriteFailure = func() time.Time {
			if ms := refusedSince.Load(); ms != 0 {
				return time.UnixMilli(ms)
			}
			return time.Time{}
		}
	})
	ctx := context.Background()
	at(time.Second)
	require.NoError(t, hb.tick(ctx))

	refusedSince.Store(holdBackT0.Add(1500 * time.Millisecond).UnixMilli())
	require.Equal(t, holdBackT0.Add(time.Second), hb.Watermark(at(3*time.Second)))
	refusedSince.Store(0)
	wait.Store(int64(6 * time.Second))
	require.NoError(t, hb.tick(ctx))
	st := hb.Status()
	require.True(t, st.Active)
	require.Equal(t, holdBackT0.Add(19*time.Second), st.Until, "a grace after the tick returned at 9s")
}

// TestHoldBackTickThatWaitedHoldsBack: a tick whose round trip took seconds read the other replicas'
// windows as they were when it was sent; it holds back over its wait and a grace after, so that what they
// opened meanwhile reaches it before a claim does. A round trip in time holds nothing.
func TestHoldBackTickThatWaitedHoldsBack(t *testing.T) {
	hb, at, wait := startedHoldBack(t, nil)
	ctx := context.Background()
	at(time.Second)
	wait.Store(int64(900 * time.Millisecond))
	require.NoError(t, hb.tick(ctx))
	require.False(t, hb.Status().Active, "a round trip within a second")

	at(3 * time.Second)
	wait.Store(int64(6 * time.Second))
	require.NoError(t, hb.tick(ctx))
	st := hb.Status()
	require.True(t, st.Active)
	require.Equal(t, redisUnreachable, st.Reason)
	require.Equal(t, holdBackT0.Add(19*time.Second), st.Until, "a grace after the tick returned at 9s")
	require.Equal(t, holdBackT0.Add(time.Second), hb.Watermark(at(9*time.Second)), "from the last share before it")
}

// TestWindowsSharedAcrossReplicas: a window one replica opens holds every replica back once shared, with
// its cause, scope and reason; its grace after it closes holds them too; a replica that dies with a
// window open leaves it holding until the grace after its last word.
func TestWindowsSharedAcrossReplicas(t *testing.T) {
	rdb, clk := holdBackRedis(t)
	r1, r2 := newReplicaTracker(rdb, "r1", clk.Now, nil), newReplicaTracker(rdb, "r2", clk.Now, nil)
	ctx := context.Background()
	require.NoError(t, r1.Start(ctx))
	require.NoError(t, r2.Start(ctx))

	from := holdBackT0.Add(-time.Second)
	r1.Open("kafka/signals/3", CauseIngest, ScopeAll, from, "kafka: partition 3 revoked")
	require.Equal(t, from, r1.Watermark(clk.Now()), "the replica's own window holds at once")
	require.Equal(t, clk.Now(), r2.Watermark(clk.Now()), "not shared yet")
	ticks(t, r1, r2)
	require.Equal(t, from, r2.Watermark(clk.Now()))
	st := r2.Status()
	require.True(t, st.Active)
	require.Equal(t, "kafka: partition 3 revoked (replica r1)", st.Reason)
	require.Len(t, st.Windows, 1)
	w := st.Windows[0]
	require.Equal(t, []any{"kafka/signals/3", "r1", CauseIngest, ScopeAll, from, time.Time{}}, []any{w.ID, w.Replica, w.Cause, w.Scope, w.From, w.To})

	clk.Advance(5 * time.Second)
	r1.Close("kafka/signals/3", clk.Now())
	ticks(t, r1, r2)
	require.Equal(t, holdBackT0.Add(15*time.Second), r2.Status().Until, "closed at t0+5s, grace 10s")
	clk.Set(holdBackT0.Add(15*time.Second - time.Millisecond))
	require.Equal(t, from, r2.Watermark(clk.Now()), "still in the grace")
	clk.Set(holdBackT0.Add(15 * time.Second))
	ticks(t, r1, r2)
	require.False(t, r2.Status().Active)
	require.Equal(t, clk.Now(), r2.Watermark(clk.Now()))

	// r1 opens another window and dies (no more ticks, no release): r2 honours it until a grace after
	// r1's last word, then forgets r1.
	last := clk.Now()
	r1.Open("ingest/mqtt", CauseIngest, ScopeAll, last, "mqtt: disconnected")
	ticks(t, r1)
	clk.Advance(8 * time.Second) // past staleness (7s at these intervals)
	ticks(t, r2)
	st = r2.Status()
	require.True(t, st.Active, "a dead replica's window still holds")
	require.Equal(t, last.Add(10*time.Second), st.Until, "closed at its last word, then its grace")
	require.Equal(t, last, r2.Watermark(clk.Now()))
	clk.Set(last.Add(10 * time.Second))
	ticks(t, r2)
	require.Equal(t, clk.Now(), r2.Watermark(clk.Now()))
	_, err := rdb.HGet(ctx, newKeyspace("hb").windows(), "r1").Result()
	require.ErrorIs(t, err, redis.Nil, "the dead replica's entry is gone once none of its windows is live")
}

// TestMaxHoldBackEndsTheHoldDegraded: a source stuck for longer than max_hold_back holds no replica back
// past it; every replica then runs degraded (status, metric), and a window reopened while in its grace
// keeps the start of its hold, so flapping cannot extend it.
func TestMaxHoldBackEndsTheHoldDegraded(t *testing.T) {
	rdb, clk := holdBackRedis(t)
	var healthy atomic.Bool
	stuck := Probe{Name: "mqtt", Trouble: func(time.Time) ProbeTrouble {
		if healthy.Load() {
			return ProbeTrouble{}
		}
		return ProbeTrouble{Since: holdBackT0, Why: "subscription refused"}
	}}
	reg := prometheus.NewRegistry()
	r1 := newReplicaTracker(rdb, "r1", clk.Now, func(o *Options) { o.Probes, o.Registerer = []Probe{stuck}, reg })
	r2 := newReplicaTracker(rdb, "r2", clk.Now, nil)
	ctx := context.Background()
	require.NoError(t, r1.Start(ctx))
	require.NoError(t, r2.Start(ctx))
	ticks(t, r1, r2)
	require.Equal(t, holdBackT0, r2.Watermark(clk.Now()), "r1's stuck source holds r2 too")
	require.False(t, r2.degraded())

	clk.Set(holdBackT0.Add(time.Minute - time.Millisecond))
	ticks(t, r1, r2)
	require.Equal(t, holdBackT0, r2.Watermark(clk.Now()))
	require.Zero(t, gauge(t, reg, "heartbeatd_hold_back_degraded"))

	clk.Set(holdBackT0.Add(time.Minute))
	ticks(t, r1, r2)
	for _, h := range []*Tracker{r1, r2} {
		require.Equal(t, clk.Now(), h.Watermark(clk.Now()), "no hold lasts past max_hold_back")
		require.True(t, h.degraded())
		st := h.Status()
		require.False(t, st.Active)
		require.True(t, st.Degraded)
		require.Len(t, st.Windows, 1, "the stuck window is still shown")
	}
	require.Equal(t, 1.0, gauge(t, reg, "heartbeatd_hold_back_degraded"))
	require.Equal(t, 60.0, gauge(t, reg, "heartbeatd_hold_back_seconds"), "held since t0")

	// Flapping: closed and reopened within its grace, the window keeps its start of hold.
	healthy.Store(true)
	ticks(t, r1)
	r1.Open("ingest/mqtt", CauseIngest, ScopeAll, clk.Now(), "mqtt: disconnected")
	require.Equal(t, clk.Now(), r1.Watermark(clk.Now()), "reopened, still past max_hold_back")
	require.True(t, r1.degraded())

	// A new window after the old one ended holds again.
	r1.Close("ingest/mqtt", clk.Now())
	clk.Advance(11 * time.Second)
	ticks(t, r1)
	require.False(t, r1.degraded())
	r1.Open("ingest/mqtt", CauseIngest, ScopeAll, clk.Now(), "mqtt: disconnected")
	require.Equal(t, clk.Now(), r1.Watermark(clk.Now().Add(time.Millisecond)))
}

// TestStallOpensWindow: a gap in the stall check's ticks longer than detection.stall holds everything
// after the last tick at once (before the check has recorded it), then as a recorded window shared with
// the other replicas, with the grace after it.
func TestStallOpensWindow(t *testing.T) {
	rdb, clk := holdBackRedis(t)
	r1 := newReplicaTracker(rdb, "r1", clk.Now, func(o *Options) { o.Stall = time.Second })
	r2 := newReplicaTracker(rdb, "r2", clk.Now, nil)
	ctx := context.Background()
	require.NoError(t, r1.Start(ctx))
	require.NoError(t, r2.Start(ctx))
	for range 5 {
		clk.Advance(100 * time.Millisecond)
		r1.stall.tick(clk.Now())
	}
	require.Equal(t, clk.Now(), r1.Watermark(clk.Now()), "ticking on time is no stall")
	last := clk.Now()

	clk.Advance(6 * time.Second) // SIGSTOP, SIGCONT
	require.Equal(t, last, r1.Watermark(clk.Now()), "the scanner resumed first: nothing after the last tick")
	require.Equal(t, clk.Now(), r2.Watermark(clk.Now()), "the other replica was not stalled")
	resumed := clk.Now()
	r1.stall.tick(resumed)
	st := r1.Status()
	require.True(t, st.Active)
	require.Len(t, st.Windows, 1)
	w := st.Windows[0]
	require.Equal(t, []any{causeStall, last, resumed, resumed.Add(10 * time.Second)}, []any{w.Cause, w.From, w.To, w.until()})
	require.Contains(t, w.Reason, "stalled for 6s")
	require.Equal(t, last, r1.Watermark(clk.Now()))

	ticks(t, r1, r2)
	require.Equal(t, last, r2.Watermark(clk.Now()), "shared like any window")
	clk.Set(resumed.Add(10 * time.Second))
	r1.stall.reset(clk.Now()) // it kept ticking meanwhile
	ticks(t, r1, r2)
	require.Equal(t, clk.Now(), r1.Watermark(clk.Now()))
	require.Equal(t, clk.Now(), r2.Watermark(clk.Now()))
}

// TestClockOffset: the offset from Redis TIME is measured with the local clock a replica really has
// (Redis's clock cannot be moved, so the local one is skewed): a clock 2s ahead or 7s behind is
// corrected, fails Check naming the offset, makes the hold-back claim nothing and the replica step
// aside, for at most max_hold_back; a clock in step passes.
func TestClockOffset(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		skew time.Duration // local clock minus true time
		want string
	}{
		{"ahead", 2 * time.Second, "clock offset -"},
		{"behind", -7 * time.Second, "clock offset +"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			c := NewClock(ClockOptions{Client: rdb, Local: func() time.Time { return time.Now().Add(tc.skew) }, Registerer: reg})
			require.ErrorContains(t, c.Check(), "not measured")
			require.NoError(t, c.Measure(ctx))
			require.InDelta(t, -tc.skew, c.measuredOffset(), float64(500*time.Millisecond))
			require.InDelta(t, 0, time.Until(c.Now()), float64(500*time.Millisecond), "the corrected clock is the true one")
			require.ErrorContains(t, c.Check(), tc.want)
			require.ErrorContains(t, c.Check(), "exceeds detection.max_clock_offset 250ms")
			require.InDelta(t, -tc.skew.Seconds(), gauge(t, reg, "heartbeatd_clock_offset_seconds"), 0.5)

			clk := testenv.NewClock(holdBackT0)
			hb := newReplicaTracker(rdb, "skewed-"+tc.name, clk.Now, func(o *Options) { o.ClockCheck = c.Check })
			require.NoError(t, hb.Start(ctx))
			require.Equal(t, claimNothing, hb.Watermark(clk.Now()), "stops scanning")
			require.False(t, hb.Scans())
			require.Contains(t, hb.Status().Clock, tc.want)
			clk.Advance(time.Minute)
			ticks(t, hb)
			require.Equal(t, clk.Now(), hb.Watermark(clk.Now()), "bounded like every hold")
			require.True(t, hb.Scans())
			require.True(t, hb.degraded())
		})
	}
	c := NewClock(ClockOptions{Client: rdb})
	require.NoError(t, c.Measure(ctx))
	require.NoError(t, c.Check(), "a clock in step with Redis")
}

// gauge reads the value of the unlabelled gauge name from reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// TestSkewedReplicasAgree: two replicas whose own clocks are 2s ahead and 7s behind share one clock
// through Redis TIME: neither takes the other's windows for stale, and the one starting after the other
// does not take the other's alive mark for a service outage (which would hold the fleet).
func TestSkewedReplicasAgree(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	ctx := context.Background()
	replica := func(id string, skew time.Duration) *Tracker {
		c := NewClock(ClockOptions{Client: rdb, Local: func() time.Time { return time.Now().Add(skew) }, MaxOffset: time.Minute})
		require.NoError(t, c.Measure(ctx))
		return newReplicaTracker(rdb, id, c.Now, func(o *Options) { o.ClockCheck = c.Check })
	}
	behind := replica("behind", -7*time.Second)
	require.NoError(t, behind.Start(ctx))
	behind.Open("ingest/mqtt", CauseIngest, ScopeAll, behind.opts.Now(), "mqtt: disconnected")
	ticks(t, behind)

	ahead := replica("ahead", 2*time.Second)
	require.NoError(t, ahead.Start(ctx))
	st := ahead.Status()
	require.Len(t, st.Windows, 1, "the lagging replica's window is not stale, and no service outage was seen")
	require.Equal(t, "behind", st.Windows[0].Replica)
	require.True(t, st.Active)
	_, err := rdb.HGet(ctx, newKeyspace("hb").windows(), "behind").Result()
	require.NoError(t, err, "not deleted as stale")
}

// TestLegacyOutages: replicas of 0.1.0 and this version honour each other's outages during a rolling
// upgrade, through the 0.1.0 Health hash.
func TestLegacyOutages(t *testing.T) {
	rdb, clk := holdBackRedis(t)
	keys := newKeyspace("hb")
	ctx := context.Background()
	old := holdBackT0.Add(-3 * time.Second)
	require.NoError(t, rdb.HSet(ctx, keys.health(), "old", fmt.Sprintf("%d:%d:0:5000:mqtt: disconnected", holdBackT0.UnixMilli(), old.UnixMilli())).Err())
	hb := newReplicaTracker(rdb, "new", clk.Now, nil)
	require.NoError(t, hb.Start(ctx))
	require.Equal(t, old, hb.Watermark(clk.Now()), "a 0.1.0 replica's outage holds")
	require.Contains(t, hb.Status().Reason, "(replica old)")

	hb.Open("stall", causeStall, ScopeAll, holdBackT0.Add(-time.Second), "heartbeatd stalled for 2s")
	ticks(t, hb)
	v, err := rdb.HGet(ctx, keys.health(), "new").Result()
	require.NoError(t, err)
	updated, o, ok := parseOutage(v)
	require.True(t, ok, "a 0.1.0 replica reads ours")
	require.Equal(t, holdBackT0, updated)
	require.Equal(t, holdBackT0.Add(-time.Second), o.start)
	require.True(t, o.end.IsZero(), "ongoing")
}

// TestProbeFloor: a source that vouches for signals only up to a time (a Kafka group read up to its
// oldest unread record, plus the lag allowed) holds detection there before its Trouble says anything,
// and not longer than max_hold_back.
func TestProbeFloor(t *testing.T) {
	rdb, clk := holdBackRedis(t)
	var floor atomic.Int64
	hb := newReplicaTracker(rdb, "r1", clk.Now, func(o *Options) {
		o.Probes = []Probe{{Name: "kafka", Trouble: func(time.Time) ProbeTrouble { return ProbeTrouble{} },
			Floor: func(time.Time) time.Time { return time.UnixMilli(floor.Load()) }}}
	})
	require.NoError(t, hb.Start(context.Background()))
	floor.Store(holdBackT0.Add(time.Second).UnixMilli())
	require.Equal(t, holdBackT0, hb.Watermark(clk.Now()), "a floor ahead of now holds nothing")
	clk.Advance(3 * time.Second)
	require.Equal(t, holdBackT0.Add(time.Second), hb.Watermark(clk.Now()))
	require.False(t, hb.Status().Active, "no window: nothing to show or wait a grace for")
	clk.Set(holdBackT0.Add(time.Second + time.Minute))
	require.Equal(t, clk.Now(), hb.Watermark(clk.Now()), "not past max_hold_back")
}
