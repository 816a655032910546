package deadline_test

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
)

// clock is a settable time source shared by the store and the test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var timeouts = map[string]time.Duration{"default": 60 * time.Second, "gateway": 30 * time.Second, "sensor": 10 * time.Minute}

func timeoutOf(name string) time.Duration {
	if d, ok := timeouts[name]; ok {
		return d
	}
	return timeouts["default"]
}

type fixture struct {
	store *deadline.Store
	rdb   redis.UniversalClient
	clock *clock
}

// TestMain stops the Redis Cluster the tests share (see testenv.RedisBackends).
func TestMain(m *testing.M) { testenv.Main(m) }

// eachBackend runs test once per Redis deployment (standalone, cluster) as a subtest of that name, each
// time on an empty Redis with a store of slots slots.
func eachBackend(t *testing.T, slots int, test func(t *testing.T, f fixture)) {
	t.Helper()
	for _, b := range testenv.RedisBackends(t) {
		t.Run(b.Name, func(t *testing.T) { test(t, setup(t, b.Client(t), slots)) })
	}
}

func setup(tb testing.TB, rdb redis.UniversalClient, slots int) fixture {
	tb.Helper()
	c := &clock{t: time.UnixMilli(1_763_800_000_000)}
	store, err := deadline.New(rdb, deadline.Options{Slots: slots, Now: c.Now, Timeout: timeoutOf})
	require.NoError(tb, err)
	require.NoError(tb, store.Load(context.Background(), "default", "gateway", "sensor"))
	return fixture{store: store, rdb: rdb, clock: c}
}

func (f fixture) claimAll(t *testing.T, opts deadline.ClaimOptions) deadline.ClaimResult {
	t.Helper()
	if opts.Now.IsZero() {
		opts.Now = f.clock.Now()
	}
	if opts.Lease == 0 {
		opts.Lease = 30 * time.Second
	}
	if opts.Batch == 0 {
		opts.Batch = 256
	}
	res, err := f.store.Claim(context.Background(), allSlots(f.store.Slots()), opts)
	require.NoError(t, err)
	return res
}

func allSlots(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func devices(claims []deadline.Claim) []string {
	var out []string
	for _, c := range claims {
		out = append(out, c.Device)
	}
	sort.Strings(out)
	return out
}

func TestRefreshNeverMovesDeadlineBack(t *testing.T) {
	eachBackend(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		t0 := f.clock.Now()
		require.NoError(t, f.store.Refresh(ctx, []deadline.Signal{{Device: "d1", Type: "gateway", Seen: t0.Add(10 * time.Second)}}))
		// An out-of-order signal, then a replay of the newest one.
		require.NoError(t, f.store.Refresh(ctx, []deadline.Signal{
			{Device: "d1", Type: "gateway", Seen: t0},
			{Device: "d1", Type: "gateway", Seen: t0.Add(10 * time.Second)},
		}))
		d, found, err := f.store.Device(ctx, "d1")
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, t0.Add(40*time.Second).UnixMilli(), d.Deadline.UnixMilli())
		require.Equal(t, "gateway", d.Type)
	})
}

func TestUntypedSignalKeepsRecordedType(t *testing.T) {
	eachBackend(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		t0 := f.clock.Now()
		require.NoError(t, f.store.Refresh(ctx, []deadline.Signal{{Device: "gw", Type: "gateway", Seen: t0}}))
		require.NoError(t, f.store.Refresh(ctx, []deadline.Signal{{Device: "gw", Seen: t0.Add(time.Second)}, {Device: "new", Seen: t0}}))
		gw, _, err := f.store.Device(ctx, "gw")
		require.NoError(t, err)
		require.Equal(t, "gateway", gw.Type)
		require.Equal(t, t0.Add(31*time.Second).UnixMilli(), gw.Deadline.UnixMilli(), "untyped signal uses the recorded type's timeout")
		nd, _, err := f.store.Device(ctx, "new")
		require.NoError(t, err)
		require.Equal(t, "default", nd.Type)
		require.Equal(t, t0.Add(60*time.Second).UnixMilli(), nd.Deadline.UnixMilli())
	})
}

// An interrupted device whose claim nothing has acted on yet keeps its type for an untyped signal: the
// claim stores its state as the bare deadline score, and the refresh reads the type from that too.
func TestUntypedSignalOfJustClaimedDeviceKeepsItsType(t *testing.T) {
	eachBackend(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		require.NoError(t, f.store.Refresh(ctx, []deadline.Signal{{Device: "s", Type: "sensor", Seen: f.clock.Now()}}))
		f.clock.Advance(11 * time.Minute)
		c := f.claimAll(t, deadline.ClaimOptions{}).Claims
		require.Len(t, c, 1)
		require.Equal(t, "sensor", c[0].Type)
		seen := f.clock.Now()
		require.NoError(t, f.store.Refresh(ctx, []deadline.Signal{{Device: "s", Seen: seen}}))
		d, _, err := f.store.Device(ctx, "s")
		require.NoError(t, err)
		require.Equal(t, "sensor", d.Type)
		require.Equal(t, seen.Add(10*time.Minute).UnixMilli(), d.Deadline.UnixMilli(), "the sensor timeout, not the default")
		require.NotNil(t, d.Incident, "the incident stays open until the alarm loop reports recovery")
		want := c[0].State
		want.Next, want.InterruptedAt = 1, want.Deadline // committed by the claim (see DecodeState)
		require.Equal(t, want, *d.Incident)
	})
}

func TestDecodeStateReadsFullAndClaimForms(t *testing.T) {
	full := deadline.State{Deadline: 1_763_800_031_000, TypeIndex: 2, Next: 3, Acked: true, InterruptedAt: 1_763_800_031_005, Failures: 1, Reason: "kafka: a:b"}
	got, err := deadline.DecodeState(full.Encode())
	require.NoError(t, err)
	require.Equal(t, full, got)
	got, err = deadline.DecodeState(fmt.Sprint(1_763_800_031_000*deadline.MaxTypes + 2))
	require.NoError(t, err)
	require.Equal(t, deadline.State{Deadline: 1_763_800_031_000, TypeIndex: 2, Next: 1, InterruptedAt: 1_763_800_031_000}, got,
		"a committed incident: interrupted sent, repeats timed from the deadline")
	for _, bad := range []string{"", "x", "-5", "1:2"} {
		_, err := deadline.DecodeState(bad)
		require.Error(t, err, "%q", bad)
	}
}

func TestTypeRegistryIsSharedBetweenStores(t *testing.T) {
	eachBackend(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		require.NoError(t, f.store.Refresh(ctx, []deadline.Signal{{Device: "x", Type: "brand-new-type", Seen: f.clock.Now()}}))
		other, err := deadline.New(f.rdb, deadline.Options{Slots: 8, Now: f.clock.Now, Timeout: timeoutOf})
		require.NoError(t, err)
		d, _, err := other.Device(ctx, "x")
		require.NoError(t, err)
		require.Equal(t, "brand-new-type", d.Type, "a replica that never saw the name resolves it from Redis")
	})
}

func TestRefreshedDeviceIsNeverClaimed(t *testing.T) {
	eachBackend(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		for range 5 {
			require.NoError(t, f.store.Refresh(ctx, []deadline.Signal{{Device: "alive", Type: "gateway", Seen: f.clock.Now()}}))
			f.clock.Advance(29 * time.Second)
			res := f.claimAll(t, deadline.ClaimOptions{})
			require.Empty(t, res.Claims)
		}
	})
}

func TestSilentDeviceClaimedOnceWithDeadlineAndType(t *testing.T) {
	eachBackend(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		t0 := f.clock.Now()
		require.NoError(t, f.store.Refresh(ctx, []deadline.Signal{{Device: "s1", Type: "gateway", Seen: t0}}))
		f.clock.Advance(30 * time.Second)
		res := f.claimAll(t, deadline.ClaimOptions{})
		require.Len(t, res.Claims, 1)
		c := res.Claims[0]
		require.Equal(t, "s1", c.Device)
		require.Equal(t, "gateway", c.Type)
		require.True(t, c.Fresh)
		require.Equal(t, t0.Add(30*time.Second).UnixMilli(), c.State.Deadline)
		require.Equal(t, deadline.Slot("s1", 8), c.Slot)
		require.Empty(t, f.claimAll(t, deadline.ClaimOptions{}).Claims, "claimed once")
	})
}

func TestWatermarkHoldsBackLaterDeadlines(t *testing.T) {
	eachBackend(t, 4, func(t *testing.T, f fixture) {
		ctx := context.Background()
		t0 := f.clock.Now()
		require.NoError(t, f.store.Refresh(ctx, []deadline.Signal{
			{Device: "early", Type: "gateway", Seen: t0},
			{Device: "late", Type: "gateway", Seen: t0.Add(10 * time.Second)},
		}))
		f.clock.Advance(time.Minute)
		res := f.claimAll(t, deadline.ClaimOptions{Watermark: t0.Add(35 * time.Second)})
		require.Equal(t, []string{"early"}, devices(res.Claims))
		require.Equal(t, []string{"late"}, devices(f.claimAll(t, deadline.ClaimOptions{}).Claims))
	})
}

func TestConcurrentClaimersClaimEachDeviceOnce(t *testing.T) {
	const n = 100_000
	eachBackend(t, 64, func(t *testing.T, f fixture) {
		ctx := context.Background()
		t0 := f.clock.Now()
		for i := 0; i < n; i += 1000 {
			batch := make([]deadline.Signal, 1000)
			for j := range batch {
				batch[j] = deadline.Signal{Device: fmt.Sprintf("dev-%d", i+j), Type: "gateway", Seen: t0}
			}
			require.NoError(t, f.store.Refresh(ctx, batch))
		}
		f.clock.Advance(time.Minute)
		var mu sync.Mutex
		seen := make(map[string]int, n)
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					res, err := f.store.Claim(ctx, allSlots(64), deadline.ClaimOptions{Now: f.clock.Now(), Lease: time.Hour, Batch: 128})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					for _, c := range res.Claims {
						seen[c.Device]++
					}
					mu.Unlock()
					if len(res.Claims) == 0 && !res.More {
						return
					}
				}
			}()
		}
		wg.Wait()
		require.Len(t, seen, n)
		for d, k := range seen {
			if k != 1 {
				t.Fatalf("%s claimed %d times", d, k)
			}
		}
	})
}

func TestUnacknowledgedClaimIsRedeliveredAfterLease(t *testing.T) {
	eachBackend(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		require.NoError(t, f.store.Refresh(ctx, []deadline.Signal{{Device: "d", Type: "gateway", Seen: f.clock.Now()}}))
		f.clock.Advance(31 * time.Second)
		first := f.claimAll(t, deadline.ClaimOptions{Lease: 5 * time.Second})
		require.Len(t, first.Claims, 1)
		f.clock.Advance(4 * time.Second)
		require.Empty(t, f.claimAll(t, deadline.ClaimOptions{Lease: 5 * time.Second}).Claims, "still leased")
		f.clock.Advance(time.Second)
		again := f.claimAll(t, deadline.ClaimOptions{Lease: 5 * time.Second})
		require.Len(t, again.Claims, 1)
		require.False(t, again.Claims[0].Fresh)
		if diff := cmp.Diff(first.Claims[0].State, again.Claims[0].State); diff != "" {
			t.Fatalf("redelivered state differs (-first +again):\n%s", diff)
		}
	})
}

// withRepeats is f with a store that commits gateway incidents with a one-minute repeat interval and
// every other type without repeats, as the daemon's policies would.
func withRepeats(t *testing.T, f fixture) fixture {
	t.Helper()
	store, err := deadline.New(f.rdb, deadline.Options{Slots: f.store.Slots(), Now: f.clock.Now, Timeout: timeoutOf,
		RepeatEvery: func(typ string) time.Duration {
			if typ == "gateway" {
				return time.Minute
			}
			return 0
		}})
	require.NoError(t, err)
	require.NoError(t, store.Load(context.Background(), "default", "gateway", "sensor"))
	f.store = store
	return f
}

// A plain fresh claim is stored as the interruption the alarm loop sends: releasing its record is its
// whole acknowledgement, after which nothing is redelivered and the next act is one repeat away.
func TestCommittedClaimIsSettledByReleasingItsRecord(t *testing.T) {
	eachBackend(t, 8, func(t *testing.T, f fixture) {
		f = withRepeats(t, f)
		ctx := context.Background()
		require.NoError(t, f.store.Refresh(ctx, []deadline.Signal{
			{Device: "g", Type: "gateway", Seen: f.clock.Now()}, {Device: "d", Type: "default", Seen: f.clock.Now()}}))
		f.clock.Advance(61 * time.Second)
		claimedAt := f.clock.Now()
		res := f.claimAll(t, deadline.ClaimOptions{})
		require.Len(t, res.Claims, 2)
		for _, c := range res.Claims {
			require.True(t, c.Fresh)
			require.NotEmpty(t, c.Record, "%s: committed", c.Device)
			require.Zero(t, c.State.Next, "%s: handed out as nothing sent yet", c.Device)
		}
		inFlight, err := f.store.Count(ctx)
		require.NoError(t, err)
		require.Equal(t, deadline.Counts{Interrupted: 2, Pending: 2}, inFlight, "the in-flight records are not counted as devices")
		_, err = f.store.Settle(ctx, nil, deadline.RecordsOf(res.Claims))
		require.NoError(t, err)

		g, _, err := f.store.Device(ctx, "g")
		require.NoError(t, err)
		require.Equal(t, 1, g.Incident.Next, "interrupted recorded as sent")
		require.Equal(t, claimedAt.Add(time.Minute).UnixMilli(), g.NextAct.UnixMilli(), "the first repeat one interval away")
		d, _, err := f.store.Device(ctx, "d")
		require.NoError(t, err)
		require.True(t, d.NextAct.IsZero(), "no repeats: dormant until it recovers")
		c, err := f.store.Count(ctx)
		require.NoError(t, err)
		require.Equal(t, deadline.Counts{Interrupted: 2, Pending: 2}, c)

		f.clock.Advance(59 * time.Second)
		require.Empty(t, f.claimAll(t, deadline.ClaimOptions{}).Claims, "released: nothing redelivered after the lease")
		f.clock.Advance(time.Second)
		again := f.claimAll(t, deadline.ClaimOptions{}).Claims
		require.Equal(t, []string{"g"}, devices(again), "the repeat comes due")
		require.False(t, again[0].Fresh)
		require.Equal(t, 1, again[0].State.Next)
		require.Empty(t, again[0].Record)
	})
}

// A record whose lease ran out (its holder crashed before publishing) hands out again the claims still
// stored as committed, with their deadlines; claims that were acknowledged otherwise or deleted meanwhile
// are not handed out again.
func TestExpiredRecordRedeliversTheClaimsStillCommitted(t *testing.T) {
	eachBackend(t, 1, func(t *testing.T, f fixture) {
		f = withRepeats(t, f)
		ctx := context.Background()
		var sigs []deadline.Signal
		for _, dev := range []string{"a", "b", "c"} {
			sigs = append(sigs, deadline.Signal{Device: dev, Type: "gateway", Seen: f.clock.Now()})
		}
		require.NoError(t, f.store.Refresh(ctx, sigs))
		f.clock.Advance(31 * time.Second)
		first := f.claimAll(t, deadline.ClaimOptions{Lease: 5 * time.Second})
		require.Equal(t, []string{"a", "b", "c"}, devices(first.Claims))
		byDevice := map[string]deadline.Claim{}
		for _, c := range first.Claims {
			byDevice[c.Device] = c
		}
		deleted, err := f.store.Delete(ctx, "b")
		require.NoError(t, err)
		require.True(t, deleted)
		c := byDevice["c"]
		st := c.State
		st.Failures, st.Reason = 1, "kafka down"
		applied, err := f.store.Acknowledge(ctx, []deadline.Ack{{Device: "c", Slot: c.Slot, Op: deadline.Reschedule, Claimed: st.Deadline, Next: f.clock.Now().Add(time.Hour), State: st}})
		require.NoError(t, err)
		require.Equal(t, []bool{true}, applied)

		f.clock.Advance(4 * time.Second)
		require.Empty(t, f.claimAll(t, deadline.ClaimOptions{Lease: 5 * time.Second}).Claims, "still leased")
		f.clock.Advance(time.Second)
		again := f.claimAll(t, deadline.ClaimOptions{Lease: 5 * time.Second})
		require.Equal(t, []string{"a"}, devices(again.Claims))
		require.False(t, again.Claims[0].Fresh, "a redelivery, re-checked like any due entry")
		require.NotEmpty(t, again.Claims[0].Record, "leased by a new record")
		if diff := cmp.Diff(byDevice["a"].State, again.Claims[0].State); diff != "" {
			t.Fatalf("redelivered state differs (-first +again):\n%s", diff)
		}
		_, err = f.store.Settle(ctx, nil, deadline.RecordsOf(again.Claims))
		require.NoError(t, err)
		f.clock.Advance(10 * time.Second)
		require.Empty(t, f.claimAll(t, deadline.ClaimOptions{Lease: 5 * time.Second}).Claims, "settled")
	})
}

// Dormant incidents (no repeats here) are scored DormantAfter + the time they went dormant, and an
// entry an older version scored +inf reads the same: neither is ever due nor shown as a next act.
func TestDormantEntriesAreNeverDue(t *testing.T) {
	eachBackend(t, 1, func(t *testing.T, f fixture) {
		ctx := context.Background()
		c := claimOne(t, f, "new")
		_, err := f.store.Settle(ctx, nil, deadline.RecordsOf([]deadline.Claim{c}))
		require.NoError(t, err)
		act, err := f.rdb.ZScore(ctx, f.store.Keys().Alarms(0), "new").Result()
		require.NoError(t, err)
		require.Equal(t, float64(deadline.DormantAfter+f.clock.Now().UnixMilli()), act)

		old := claimOne(t, f, "old")
		_, err = f.store.Settle(ctx, nil, deadline.RecordsOf([]deadline.Claim{old}))
		require.NoError(t, err)
		require.NoError(t, f.rdb.ZAdd(ctx, f.store.Keys().Alarms(0), redis.Z{Score: math.Inf(1), Member: "old"}).Err())

		for _, dev := range []string{"new", "old"} {
			d, _, err := f.store.Device(ctx, dev)
			require.NoError(t, err)
			require.True(t, d.NextAct.IsZero(), "%s: dormant", dev)
		}
		f.clock.Advance(100 * 365 * 24 * time.Hour)
		res := f.claimAll(t, deadline.ClaimOptions{})
		require.Empty(t, res.Claims, "dormant entries are never due")
		require.True(t, res.NextAlarm.IsZero(), "and never the next alarm")
	})
}

// claimOne makes dev silent and claims it.
func claimOne(t *testing.T, f fixture, dev string) deadline.Claim {
	t.Helper()
	require.NoError(t, f.store.Refresh(context.Background(), []deadline.Signal{{Device: dev, Type: "gateway", Seen: f.clock.Now()}}))
	f.clock.Advance(31 * time.Second)
	res := f.claimAll(t, deadline.ClaimOptions{})
	require.Len(t, res.Claims, 1)
	return res.Claims[0]
}

// Due alarm entries come back with their state in one claim; an entry whose state is gone (an orphan
// left by an interrupted delete) is dropped, not handed out, and does not hide the others.
func TestDueAlarmEntriesClaimedAndOrphansDropped(t *testing.T) {
	eachBackend(t, 1, func(t *testing.T, f fixture) {
		ctx := context.Background()
		for _, dev := range []string{"a", "b"} {
			c := claimOne(t, f, dev)
			st := c.State
			st.Next = 1
			applied, err := f.store.Acknowledge(ctx, []deadline.Ack{{Device: dev, Slot: c.Slot, Op: deadline.Reschedule, Claimed: st.Deadline, Next: f.clock.Now().Add(time.Minute), State: st}})
			require.NoError(t, err)
			require.Equal(t, []bool{true}, applied)
		}
		alarms := f.store.Keys().Alarms(0)
		require.NoError(t, f.rdb.ZAdd(ctx, alarms, redis.Z{Score: float64(f.clock.Now().UnixMilli()), Member: "orphan"}).Err())
		f.clock.Advance(2 * time.Minute)
		res := f.claimAll(t, deadline.ClaimOptions{})
		require.ElementsMatch(t, []string{"a", "b"}, devices(res.Claims))
		for _, c := range res.Claims {
			require.False(t, c.Fresh)
			require.Equal(t, 1, c.State.Next, "%s: the state the ack wrote", c.Device)
		}
		n, err := f.rdb.ZScore(ctx, alarms, "orphan").Result()
		require.ErrorIs(t, err, redis.Nil, "orphan still in the alarms set with score %v", n)
		require.Empty(t, f.claimAll(t, deadline.ClaimOptions{}).Claims, "the returned entries are leased")
	})
}

func TestAcknowledgeRescheduleRemovePark(t *testing.T) {
	eachBackend(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		c := claimOne(t, f, "d")
		st := c.State
		st.Next, st.InterruptedAt = 1, f.clock.Now().UnixMilli()
		applied, err := f.store.Acknowledge(ctx, []deadline.Ack{{Device: "d", Slot: c.Slot, Op: deadline.Reschedule, Claimed: c.State.Deadline, Next: f.clock.Now().Add(time.Minute), State: st}})
		require.NoError(t, err)
		require.Equal(t, []bool{true}, applied)
		d, _, err := f.store.Device(ctx, "d")
		require.NoError(t, err)
		require.Equal(t, f.clock.Now().Add(time.Minute).UnixMilli(), d.NextAct.UnixMilli())
		require.Equal(t, 1, d.Incident.Next)

		f.clock.Advance(59 * time.Second)
		require.Empty(t, f.claimAll(t, deadline.ClaimOptions{}).Claims)
		f.clock.Advance(time.Second)
		rep := f.claimAll(t, deadline.ClaimOptions{})
		require.Len(t, rep.Claims, 1)
		require.Equal(t, 1, rep.Claims[0].State.Next)

		// An ack for another incident (wrong deadline) is ignored.
		applied, err = f.store.Acknowledge(ctx, []deadline.Ack{{Device: "d", Slot: c.Slot, Op: deadline.Remove, Claimed: c.State.Deadline - 1}})
		require.NoError(t, err)
		require.Equal(t, []bool{false}, applied)

		st.Failures, st.Reason = 10, "kafka: broker unreachable"
		applied, err = f.store.Acknowledge(ctx, []deadline.Ack{{Device: "d", Slot: c.Slot, Op: deadline.Park, Claimed: c.State.Deadline, State: st}})
		require.NoError(t, err)
		require.Equal(t, []bool{true}, applied)
		d, _, err = f.store.Device(ctx, "d")
		require.NoError(t, err)
		require.True(t, d.Parked)
		require.Equal(t, "kafka: broker unreachable", d.Incident.Reason)
		counts, err := f.store.Count(ctx)
		require.NoError(t, err)
		require.Equal(t, deadline.Counts{Interrupted: 1, Parked: 1}, counts)

		applied, err = f.store.Acknowledge(ctx, []deadline.Ack{{Device: "d", Slot: c.Slot, Op: deadline.Remove, Claimed: c.State.Deadline}})
		require.NoError(t, err)
		require.Equal(t, []bool{true}, applied)
		_, found, err := f.store.Device(ctx, "d")
		require.NoError(t, err)
		require.False(t, found)
	})
}

// TestAcksOfOneDeviceInOneCallApplyInOrder: a slot's acks go to Redis as one call; two for the same
// device must behave as if sent one after the other, and the batch must span more than one call.
func TestAcksOfOneDeviceInOneCallApplyInOrder(t *testing.T) {
	eachBackend(t, 1, func(t *testing.T, f fixture) {
		ctx := context.Background()
		c := claimOne(t, f, "d")
		st := c.State
		st.Next = 1
		resched := deadline.Ack{Device: "d", Slot: c.Slot, Op: deadline.Reschedule, Claimed: c.State.Deadline, Next: f.clock.Now().Add(time.Hour), State: st}
		remove := deadline.Ack{Device: "d", Slot: c.Slot, Op: deadline.Remove, Claimed: c.State.Deadline}
		acks := []deadline.Ack{resched, remove, resched}
		for range 1500 { // past one call's limit: the rest must still apply, and in order
			acks = append(acks, deadline.Ack{Device: "d", Slot: c.Slot, Op: deadline.Remove, Claimed: c.State.Deadline})
		}
		applied, err := f.store.Acknowledge(ctx, acks)
		require.NoError(t, err)
		require.Equal(t, []bool{true, true, false}, applied[:3], "the reschedule applies, the remove ends the incident, the repeat finds it gone")
		require.NotContains(t, applied[3:], true)
		_, found, err := f.store.Device(ctx, "d")
		require.NoError(t, err)
		require.False(t, found, "removed, and not resurrected by the later reschedule")
	})
}

func TestAckDoesNotClobberSignalArrivedMeanwhile(t *testing.T) {
	eachBackend(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		c := claimOne(t, f, "d")
		// The device signals while the claim is being published.
		require.NoError(t, f.store.Refresh(ctx, []deadline.Signal{{Device: "d", Seen: f.clock.Now()}}))
		st := c.State
		st.Next = 1
		_, err := f.store.Acknowledge(ctx, []deadline.Ack{{Device: "d", Slot: c.Slot, Op: deadline.Reschedule, Claimed: c.State.Deadline, Next: f.clock.Now().Add(time.Hour), State: st}})
		require.NoError(t, err)
		res := f.claimAll(t, deadline.ClaimOptions{})
		require.Len(t, res.Claims, 1, "the recovery is due now, not in an hour")
		cur, err := f.store.CurrentDeadlines(ctx, res.Claims)
		require.NoError(t, err)
		require.Greater(t, cur[0].UnixMilli(), c.State.Deadline)
	})
}

func TestOperatorAckSurvivesInFlightReschedule(t *testing.T) {
	eachBackend(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		c := claimOne(t, f, "d")
		ok, err := f.store.SetAcked(ctx, "d")
		require.NoError(t, err)
		require.True(t, ok)
		st := c.State
		st.Next = 1
		_, err = f.store.Acknowledge(ctx, []deadline.Ack{{Device: "d", Slot: c.Slot, Op: deadline.Reschedule, Claimed: c.State.Deadline, Next: f.clock.Now().Add(time.Minute), State: st}})
		require.NoError(t, err)
		d, _, err := f.store.Device(ctx, "d")
		require.NoError(t, err)
		require.True(t, d.Incident.Acked)
		require.Equal(t, 1, d.Incident.Next)
		ok, err = f.store.SetAcked(ctx, "never-seen")
		require.NoError(t, err)
		require.False(t, ok)
	})
}

func TestRecoveryProbeMakesDormantIncidentDue(t *testing.T) {
	eachBackend(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		c := claimOne(t, f, "d")
		st := c.State
		st.Next, st.Exhausted = 3, true
		_, err := f.store.Acknowledge(ctx, []deadline.Ack{{Device: "d", Slot: c.Slot, Op: deadline.Reschedule, Claimed: c.State.Deadline, Dormant: true, State: st}})
		require.NoError(t, err)
		f.clock.Advance(24 * time.Hour)
		res := f.claimAll(t, deadline.ClaimOptions{})
		require.Empty(t, res.Claims, "dormant: no act")
		require.True(t, res.NextAlarm.IsZero(), "a dormant entry is no next due")

		require.NoError(t, f.store.Refresh(ctx, []deadline.Signal{{Device: "d", Seen: f.clock.Now()}}))
		res = f.claimAll(t, deadline.ClaimOptions{})
		require.Len(t, res.Claims, 1)
		require.Equal(t, c.State.Deadline, res.Claims[0].State.Deadline)
		require.True(t, res.Claims[0].State.Exhausted)
	})
}

func TestReplayedOldSignalDoesNotOpenIncident(t *testing.T) {
	eachBackend(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		t0 := f.clock.Now()
		c := claimOne(t, f, "d")
		// A replay of a signal older than the open incident puts the device back with a passed deadline.
		require.NoError(t, f.store.Refresh(ctx, []deadline.Signal{{Device: "d", Seen: t0.Add(-time.Minute)}}))
		res := f.claimAll(t, deadline.ClaimOptions{})
		for _, cl := range res.Claims {
			require.False(t, cl.Fresh, "no new incident from a replay")
			require.Equal(t, c.State.Deadline, cl.State.Deadline)
		}
	})
}

func TestNewIncidentReportsReplacedOne(t *testing.T) {
	eachBackend(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		c := claimOne(t, f, "d")
		st := c.State
		st.Next = 1
		_, err := f.store.Acknowledge(ctx, []deadline.Ack{{Device: "d", Slot: c.Slot, Op: deadline.Reschedule, Claimed: c.State.Deadline, Next: f.clock.Now().Add(time.Hour), State: st}})
		require.NoError(t, err)
		// Signals, then falls silent again before the recovery was handled.
		require.NoError(t, f.store.Refresh(ctx, []deadline.Signal{{Device: "d", Seen: f.clock.Now()}}))
		f.clock.Advance(31 * time.Second)
		res := f.claimAll(t, deadline.ClaimOptions{})
		require.Len(t, res.Claims, 1)
		require.True(t, res.Claims[0].Fresh)
		require.NotNil(t, res.Claims[0].Replaced)
		require.Equal(t, c.State.Deadline, res.Claims[0].Replaced.Deadline)
		require.Equal(t, 1, res.Claims[0].Replaced.Next)
	})
}

func TestNextDue(t *testing.T) {
	eachBackend(t, 4, func(t *testing.T, f fixture) {
		ctx := context.Background()
		t0 := f.clock.Now()
		require.NoError(t, f.store.Refresh(ctx, []deadline.Signal{
			{Device: "a", Type: "gateway", Seen: t0},
			{Device: "b", Type: "gateway", Seen: t0.Add(5 * time.Second)},
			{Device: "c", Type: "default", Seen: t0},
		}))
		res := f.claimAll(t, deadline.ClaimOptions{})
		require.Equal(t, t0.Add(30*time.Second).UnixMilli(), res.NextDeadline.UnixMilli())
		require.True(t, res.NextAlarm.IsZero())
		f.clock.Advance(30 * time.Second)
		res = f.claimAll(t, deadline.ClaimOptions{Lease: 7 * time.Second})
		require.Equal(t, []string{"a"}, devices(res.Claims))
		require.Equal(t, t0.Add(35*time.Second).UnixMilli(), res.NextDeadline.UnixMilli())
		require.Equal(t, t0.Add(37*time.Second).UnixMilli(), res.NextAlarm.UnixMilli(), "the lease end is the next alarm")

		wait := deadline.NextWait(f.clock.Now(), false, res, 50*time.Millisecond)
		require.Equal(t, 50*time.Millisecond, wait, "capped by max idle wait")
		wait = deadline.NextWait(t0.Add(34990*time.Millisecond), false, res, 50*time.Millisecond)
		require.Equal(t, 10*time.Millisecond, wait)
		wait = deadline.NextWait(t0.Add(40*time.Second), true, res, 50*time.Millisecond)
		require.Equal(t, time.Duration(0), wait, "the overdue lease end is claimable at once")
		wait = deadline.NextWait(t0.Add(34990*time.Millisecond), true, res, 50*time.Millisecond)
		require.Equal(t, 50*time.Millisecond, wait, "held back: a deadline that may not be claimable does not wake")
	})
}

func TestBatchLimitReportsMore(t *testing.T) {
	eachBackend(t, 1, func(t *testing.T, f fixture) {
		ctx := context.Background()
		var sigs []deadline.Signal
		for i := range 10 {
			sigs = append(sigs, deadline.Signal{Device: fmt.Sprint("d", i), Type: "gateway", Seen: f.clock.Now()})
		}
		require.NoError(t, f.store.Refresh(ctx, sigs))
		f.clock.Advance(time.Minute)
		res := f.claimAll(t, deadline.ClaimOptions{Batch: 4})
		require.Len(t, res.Claims, 4)
		require.True(t, res.More)
		res = f.claimAll(t, deadline.ClaimOptions{Batch: 4})
		require.Len(t, res.Claims, 4)
		res = f.claimAll(t, deadline.ClaimOptions{Batch: 4})
		require.Len(t, res.Claims, 2)
		require.False(t, res.More)
	})
}

func TestListCountDelete(t *testing.T) {
	eachBackend(t, 16, func(t *testing.T, f fixture) {
		ctx := context.Background()
		var sigs []deadline.Signal
		for i := range 300 {
			typ := "gateway"
			if i%3 == 0 {
				typ = "sensor"
			}
			sigs = append(sigs, deadline.Signal{Device: fmt.Sprint("d", i), Type: typ, Seen: f.clock.Now()})
		}
		require.NoError(t, f.store.Refresh(ctx, sigs))
		f.clock.Advance(31 * time.Second) // the 200 gateways go silent
		for {
			res := f.claimAll(t, deadline.ClaimOptions{})
			if len(res.Claims) == 0 {
				break
			}
		}
		collect := func(opts deadline.ListOptions) []string {
			var all []string
			for {
				page, next, err := f.store.List(ctx, opts)
				require.NoError(t, err)
				for _, d := range page {
					all = append(all, d.ID)
				}
				if next == "" {
					return all
				}
				opts.Cursor = next
			}
		}
		require.Len(t, collect(deadline.ListOptions{Limit: 7}), 100)
		require.Len(t, collect(deadline.ListOptions{Limit: 7, Interrupted: true}), 200)
		require.Len(t, collect(deadline.ListOptions{Limit: 50, Interrupted: true, Type: "sensor"}), 0)
		online, interrupted, err := f.store.CountByType(ctx)
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"sensor": 100}, online)
		require.Equal(t, map[string]int64{"gateway": 200}, interrupted)
		counts, err := f.store.Count(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(200), counts.Interrupted, "the state hashes' guard field is not an incident")
		// Lookups in a listpack-encoded hash are linear scans; the guard keeps every state hash a hashtable.
		for slot := range 4 {
			enc, err := f.rdb.ObjectEncoding(ctx, f.store.Keys().State(slot)).Result()
			require.NoError(t, err)
			require.Equal(t, "hashtable", enc, "slot %d", slot)
		}
		_, _, err = f.store.List(ctx, deadline.ListOptions{Cursor: "garbage"})
		require.ErrorIs(t, err, deadline.ErrBadCursor)

		ok, err := f.store.Delete(ctx, "d1")
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = f.store.Delete(ctx, "d1")
		require.NoError(t, err)
		require.False(t, ok)
		counts, err = f.store.Count(ctx)
		require.NoError(t, err)
		require.Equal(t, deadline.Counts{Online: 100, Interrupted: 199, Pending: 199}, counts)
	})
}

func TestScriptsSurviveRedisLosingThem(t *testing.T) {
	eachBackend(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		require.NoError(t, f.store.Refresh(ctx, []deadline.Signal{{Device: "d", Seen: f.clock.Now()}}))
		require.NoError(t, f.rdb.ScriptFlush(ctx).Err())
		require.NoError(t, f.store.Refresh(ctx, []deadline.Signal{{Device: "d", Seen: f.clock.Now()}}))
		f.clock.Advance(time.Hour)
		require.NoError(t, f.rdb.ScriptFlush(ctx).Err())
		require.Len(t, f.claimAll(t, deadline.ClaimOptions{}).Claims, 1)
	})
}

// A node that lost the scripts (restarted, failed over) while the others kept them: the calls the other
// nodes ran are not sent again, so no claim is run twice and lost. On a standalone server the one node is
// the server.
func TestClaimWhenOneNodeLostTheScripts(t *testing.T) {
	eachBackend(t, 64, func(t *testing.T, f fixture) {
		ctx := context.Background()
		var sigs []deadline.Signal
		for i := range 640 {
			sigs = append(sigs, deadline.Signal{Device: fmt.Sprint("d", i), Type: "gateway", Seen: f.clock.Now()})
		}
		require.NoError(t, f.store.Refresh(ctx, sigs))
		require.Empty(t, f.claimAll(t, deadline.ClaimOptions{}).Claims, "nothing due yet; every node has the scripts now")
		if cluster, ok := f.rdb.(*redis.ClusterClient); ok {
			var once sync.Once
			require.NoError(t, cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
				var err error
				once.Do(func() { err = node.ScriptFlush(ctx).Err() })
				return err
			}))
		} else {
			require.NoError(t, f.rdb.ScriptFlush(ctx).Err())
		}
		f.clock.Advance(time.Minute)
		res := f.claimAll(t, deadline.ClaimOptions{Batch: 1000})
		require.Len(t, res.Claims, len(sigs), "every due device claimed in one wake-up")
	})
}

// TestScannersSleepUntilTheNextDeadline: several claim loops over shares of the slots, with an idle cap of
// an hour, must still wake for each deadline they learned of — and claim every device exactly once.
func TestScannersSleepUntilTheNextDeadline(t *testing.T) {
	eachBackend(t, 8, func(t *testing.T, f fixture) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// Real time: the deadlines pass while the loops sleep.
		store, err := deadline.New(f.rdb, deadline.Options{Slots: 8, Timeout: func(string) time.Duration { return 300 * time.Millisecond }})
		require.NoError(t, err)
		const n = 24
		var sigs []deadline.Signal
		start := time.Now()
		for i := range n {
			sigs = append(sigs, deadline.Signal{Device: fmt.Sprintf("dev-%02d", i), Seen: start.Add(time.Duration(i) * 40 * time.Millisecond)})
		}
		require.NoError(t, store.Refresh(ctx, sigs))
		got := make(chan deadline.Claim, 2*n)
		sc := deadline.NewScanner(deadline.ScannerOptions{
			Store: store, Slots: func() []int { return allSlots(8) }, MaxIdleWait: time.Hour, Lease: time.Hour, Batch: 16,
			Concurrency: 3,
			Handle: func(_ context.Context, claims []deadline.Claim) error {
				for _, c := range claims {
					got <- c
				}
				return nil
			},
		})
		done := make(chan error)
		go func() { done <- sc.Run(ctx) }()
		seen := map[string]int{}
		for len(seen) < n {
			select {
			case c := <-got:
				seen[c.Device]++
				require.Equal(t, 1, seen[c.Device], "%s claimed twice", c.Device)
				require.GreaterOrEqual(t, time.Now().UnixMilli(), c.State.Deadline, "%s claimed before its deadline", c.Device)
			case <-time.After(10 * time.Second):
				t.Fatalf("only %d of %d devices claimed: a loop slept for its idle cap instead of until the next deadline", len(seen), n)
			}
		}
		cancel()
		require.NoError(t, <-done)
	})
}

func TestScannerHandsClaimsAndStops(t *testing.T) {
	eachBackend(t, 8, func(t *testing.T, f fixture) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// Real time here: the scanner must wake at the deadline by itself.
		store, err := deadline.New(f.rdb, deadline.Options{Slots: 8, Timeout: func(string) time.Duration { return 200 * time.Millisecond }})
		require.NoError(t, err)
		got := make(chan deadline.Claim, 10)
		sc := deadline.NewScanner(deadline.ScannerOptions{
			Store: store, Slots: func() []int { return allSlots(8) }, MaxIdleWait: time.Second, Lease: time.Minute, Batch: 16,
			Handle: func(_ context.Context, claims []deadline.Claim) error {
				for _, c := range claims {
					got <- c
				}
				return nil
			},
		})
		done := make(chan error)
		go func() { done <- sc.Run(ctx) }()
		require.NoError(t, store.Refresh(ctx, []deadline.Signal{{Device: "quiet", Seen: time.Now()}}))
		select {
		case c := <-got:
			require.Equal(t, "quiet", c.Device)
		case <-time.After(10 * time.Second):
			t.Fatal("scanner never claimed the silent device")
		}
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("scanner did not stop on cancel")
		}
	})
}
