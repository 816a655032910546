package holdback

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// mixedFleet are the types of the grace tests: gateways that signal every few seconds beside meters that
// report every two hours.
var mixedFleet = map[string]time.Duration{"gateway": 3 * time.Second, "meter": 2 * time.Hour}

// troubleProbe is a probe whose trouble the test sets; zero = healthy.
func troubleProbe(name string, trouble *atomic.Pointer[ProbeTrouble]) Probe {
	trouble.Store(&ProbeTrouble{})
	return Probe{Name: name, Trouble: func(time.Time) ProbeTrouble { return *trouble.Load() }}
}

// TestGraceIsEachDevicesOwnTimeout: after a blind window a gateway is watched again three seconds after
// the window's end, while a meter waits its own two hours (bounded by max_hold_back), on the replica
// whose source was blind and on the one that reads its window from Redis alike; /v1/stats says so per
// type. A set grace_after_outage caps every device's grace.
func TestGraceIsEachDevicesOwnTimeout(t *testing.T) {
	rdb, clk := holdBackRedis(t)
	var trouble atomic.Pointer[ProbeTrouble]
	var graceCap atomic.Int64
	graceCap.Store(int64(2 * time.Hour)) // grace_after_outage 0: the longest timeout
	opts := func(o *Options) {
		o.Grace = func() time.Duration { return time.Duration(graceCap.Load()) }
		o.Timeouts = func() map[string]time.Duration { return mixedFleet }
		o.MaxHoldBack = 10 * time.Minute
	}
	r1 := newReplicaTracker(rdb, "r1", clk.Now, func(o *Options) {
		opts(o)
		o.Probes = []Probe{troubleProbe("mqtt", &trouble)}
	})
	r2 := newReplicaTracker(rdb, "r2", clk.Now, opts)
	ctx := context.Background()
	require.NoError(t, r1.Start(ctx))
	require.NoError(t, r2.Start(ctx))

	from := clk.Now()
	trouble.Store(&ProbeTrouble{Since: from, Why: "disconnected"})
	clk.Advance(5 * time.Second)
	ticks(t, r1, r2)
	for _, h := range []*Tracker{r1, r2} {
		wm := h.WatermarkFor(clk.Now())
		require.Equal(t, []time.Time{from, from}, []time.Time{wm(3 * time.Second), wm(2 * time.Hour)}, "open: every device held")
		require.True(t, h.HeardAfter(clk.Now()).IsZero(), "an open window holds a reported failure too")
		require.Equal(t, TypeHold{Grace: 3 * time.Second, Since: from}, h.Status().ByType["gateway"])
	}

	trouble.Store(&ProbeTrouble{})
	clk.Advance(time.Second)
	end := clk.Now()
	ticks(t, r1, r2)
	st := r2.Status()
	require.Equal(t, map[string]TypeHold{
		"gateway": {Grace: 3 * time.Second, Since: from, Until: end.Add(3 * time.Second)},
		"meter":   {Grace: 2 * time.Hour, Since: from, Until: end.Add(2 * time.Hour)},
	}, st.ByType)

	clk.Set(end.Add(3*time.Second - time.Millisecond))
	for _, h := range []*Tracker{r1, r2} {
		require.Equal(t, from, h.WatermarkFor(clk.Now())(3*time.Second), "a gateway has not had its timeout of visible time yet")
		require.Equal(t, end, h.HeardAfter(clk.Now()), "a failure reported since the window's end needs no grace")
	}
	clk.Set(end.Add(3 * time.Second))
	ticks(t, r1, r2)
	for _, h := range []*Tracker{r1, r2} {
		wm := h.WatermarkFor(clk.Now())
		require.Equal(t, clk.Now(), wm(3*time.Second), "gateways are watched again")
		require.Equal(t, from, wm(2*time.Hour), "meters wait their own timeout")
		require.Equal(t, from, h.Watermark(clk.Now()), "the watermark of every device is the meters'")
		require.NotContains(t, h.Status().ByType, "gateway")
	}
	clk.Set(from.Add(5*time.Second + 10*time.Minute)) // max_hold_back after r1's tick opened the window
	require.Equal(t, clk.Now(), r2.WatermarkFor(clk.Now())(2*time.Hour), "no hold past max_hold_back")
	require.True(t, r2.degraded(), "the meters are claimed without their full grace")
	require.True(t, r2.HeardAfter(clk.Now()).IsZero(), "no window holds past max_hold_back")
	degraded := r2.DegradedFor(func(typ string) time.Duration { return mixedFleet[typ] })()
	require.Equal(t, []bool{false, true}, []bool{degraded("gateway"), degraded("meter")}, "only the meters' events are marked")

	// grace_after_outage 1s caps every device's grace, the gateways' too.
	graceCap.Store(int64(time.Second))
	from = clk.Now()
	r1.Open("stall", causeStall, ScopeAll, from, "stalled") // another window: the first one is past max_hold_back
	clk.Advance(time.Second)
	end = clk.Now()
	r1.Close("stall", end)
	clk.Set(end.Add(time.Second - time.Millisecond))
	require.Equal(t, from, r1.Watermark(clk.Now()))
	clk.Set(end.Add(time.Second))
	require.Equal(t, clk.Now(), r1.Watermark(clk.Now()), "capped at 1s for the meters too")
}

// TestKeptWindowNeedsNoGrace: a window of a source that keeps what it did not deliver (a Kafka consumer
// behind or rebalancing) stops holding the moment it closes, for every type, since its source's floor
// covers what was not read yet. A window that was not kept at some moment keeps its grace.
func TestKeptWindowNeedsNoGrace(t *testing.T) {
	rdb, clk := holdBackRedis(t)
	var trouble atomic.Pointer[ProbeTrouble]
	r1 := kafkaReplicaTracker(rdb, "r1", clk.Now, &trouble)
	r2 := newReplicaTracker(rdb, "r2", clk.Now, func(o *Options) { o.MaxHoldBack = 10 * time.Minute })
	ctx := context.Background()
	require.NoError(t, r1.Start(ctx))
	require.NoError(t, r2.Start(ctx))

	from := clk.Now()
	trouble.Store(&ProbeTrouble{Since: from, Why: "rebalancing", Kept: true})
	clk.Advance(5 * time.Second)
	ticks(t, r1, r2)
	require.Equal(t, from, r2.Watermark(clk.Now()), "held while the group rebalances")
	trouble.Store(&ProbeTrouble{})
	clk.Advance(time.Second)
	ticks(t, r1, r2)
	for _, h := range []*Tracker{r1, r2} {
		require.Equal(t, clk.Now(), h.Watermark(clk.Now()), "read past the window: nothing held, not even the meters")
		require.False(t, h.Status().Active)
	}

	// Behind, then disconnected, then behind again: what the broker refused meanwhile may be lost.
	from = clk.Now()
	trouble.Store(&ProbeTrouble{Since: from, Why: "lagging 3s behind", Kept: true})
	ticks(t, r1)
	trouble.Store(&ProbeTrouble{Since: from, Why: "disconnected"})
	ticks(t, r1)
	trouble.Store(&ProbeTrouble{Since: from, Why: "lagging 3s behind", Kept: true})
	ticks(t, r1)
	trouble.Store(&ProbeTrouble{})
	clk.Advance(time.Second)
	end := clk.Now()
	ticks(t, r1, r2)
	require.Equal(t, from, r2.WatermarkFor(clk.Now())(time.Minute), "grace after a window that was not kept throughout")
	clk.Set(end.Add(time.Minute))
	require.Equal(t, clk.Now(), r2.WatermarkFor(clk.Now())(time.Minute))
}

// TestKeptWindowAfterALostOne: a source that lost its connection and, later, fell behind the broker
// opens two windows: the lag does not take the first window's start or grace.
func TestKeptWindowAfterALostOne(t *testing.T) {
	rdb, clk := holdBackRedis(t)
	var trouble atomic.Pointer[ProbeTrouble]
	hb := kafkaReplicaTracker(rdb, "r1", clk.Now, &trouble)
	require.NoError(t, hb.Start(context.Background()))
	lost := clk.Now()
	trouble.Store(&ProbeTrouble{Since: lost, Why: "disconnected"})
	ticks(t, hb)
	trouble.Store(&ProbeTrouble{})
	clk.Advance(time.Second)
	ticks(t, hb)

	clk.Advance(time.Minute)
	behind := clk.Now()
	trouble.Store(&ProbeTrouble{Since: behind, Why: "lagging 3s behind", Kept: true})
	ticks(t, hb)
	wm := hb.WatermarkFor(clk.Now())
	require.Equal(t, []time.Time{behind, lost}, []time.Time{wm(3 * time.Second), wm(2 * time.Hour)},
		"the lag holds from its own start; the meters are still in the first window's grace")
	trouble.Store(&ProbeTrouble{})
	clk.Advance(time.Second)
	ticks(t, hb)
	wm = hb.WatermarkFor(clk.Now())
	require.Equal(t, []time.Time{clk.Now(), lost}, []time.Time{wm(3 * time.Second), wm(2 * time.Hour)}, "the lag needed no grace")
	require.Len(t, hb.Status().Windows, 1, "the lag's window is over; the first one holds the meters on")
}

// TestKeptShareOfADeadMemberNeedsNoGrace: a replica that died reading its partitions of a Kafka group
// holds the others until the group has read them past its last word, and not a grace longer.
func TestKeptShareOfADeadMemberNeedsNoGrace(t *testing.T) {
	rdb, clk := holdBackRedis(t)
	var taken atomic.Bool
	share := func(member string) Share {
		return Share{Name: "kafka:hb", Signals: "kafka:signals", Member: member, Release: 5 * time.Second, Kept: true,
			TakenOver: func(string, time.Time) bool { return taken.Load() }}
	}
	replica := func(id, member string) *Tracker {
		return newReplicaTracker(rdb, id, clk.Now, func(o *Options) {
			o.Incarnation, o.MemberLapse, o.Shares = id+"-1", time.Second, []Share{share(member)}
		})
	}
	r1, r2 := replica("r1", "m1"), replica("r2", "m2")
	require.NoError(t, r1.Start(context.Background()))
	require.NoError(t, r2.Start(context.Background()))
	ticks(t, r1, r2)
	last := clk.Now()
	clk.Advance(1500 * time.Millisecond) // r1 stops answering
	ticks(t, r2)
	require.Equal(t, last, r2.Watermark(clk.Now()), "held from r1's last word")
	taken.Store(true)
	clk.Advance(100 * time.Millisecond)
	ticks(t, r2)
	require.Equal(t, clk.Now(), r2.Watermark(clk.Now()), "the group read past r1's last word: nothing was lost")
}

// TestGraceOverlappedByANewWindowHoldsOn: a gateway held after a first window (a broker restart) has not
// had its timeout of visible time when a second window opens (Redis down): it stays held from the first
// window's start until it had that time after the second, though the first alone would have released it
// meanwhile. Its deadline inside the first window is otherwise claimed before the signals the second
// kept from Redis are written.
func TestGraceOverlappedByANewWindowHoldsOn(t *testing.T) {
	rdb, clk := holdBackRedis(t)
	h := newReplicaTracker(rdb, "r1", clk.Now, func(o *Options) {
		o.Grace = func() time.Duration { return 2 * time.Hour }
		o.Timeouts = func() map[string]time.Duration { return mixedFleet }
		o.MaxHoldBack = 10 * time.Minute
	})
	require.NoError(t, h.Start(context.Background()))
	const gateway = 3 * time.Second

	first := clk.Now()
	h.Open("broker", CauseIngest, ScopeAll, first, "disconnected")
	clk.Advance(2 * time.Second)
	h.Close("broker", clk.Now())
	clk.Advance(2 * time.Second) // inside the gateways' grace of the first window
	second := clk.Now()
	h.Open("redis", causeRedis, ScopeAll, second, "redis unreachable")
	clk.Advance(2 * time.Second) // the first window alone would have released the gateways by now
	require.Equal(t, first, h.WatermarkFor(clk.Now())(gateway), "held from the first window's start")
	require.Equal(t, first, h.Status().ByType["gateway"].Since, "/v1/stats says the same")
	h.Close("redis", clk.Now())
	end := clk.Now()
	clk.Set(end.Add(gateway - time.Millisecond))
	require.Equal(t, first, h.WatermarkFor(clk.Now())(gateway), "not before a timeout of visible time after the second")
	clk.Set(end.Add(gateway))
	require.Equal(t, clk.Now(), h.WatermarkFor(clk.Now())(gateway), "released once the gateways had it")

	// A window that began after the gateways' grace of the one before is a blindness of its own.
	clk.Advance(10 * time.Second)
	third := clk.Now()
	h.Open("stall", causeStall, ScopeAll, third, "stalled")
	clk.Advance(time.Second)
	require.Equal(t, third, h.WatermarkFor(clk.Now())(gateway))
}
