package devstack

import (
	"context"
	"fmt"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/scan"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/internal/testenv/deadlinetest"
)

// The dev stack's Redis-protocol server is only useful if heartbeatd's Redis side runs on it unchanged:
// internal/deadline's Lua scripts (EVALSHA, ZADD GT / XX LT CH with many members, ZMSCORE, ZRANGEBYSCORE LIMIT
// WITHSCORES, string.format('%.0f'), unpack, string.match/gsub), pipelines and MULTI. These tests run
// the store through a whole incident life cycle on the stack's server and check every result against
// what Redis does.

var compatTimeout = testenv.TypeTimeouts(map[string]time.Duration{"default": 10 * time.Second, "gateway": 5 * time.Second, "sensor": 15 * time.Second})

// compatRedisAddr is the stack's Redis-protocol server, or the Redis at $DEVSTACK_COMPAT_REDIS: running
// these tests against a real Redis checks their expectations themselves.
func compatRedisAddr(t *testing.T) string {
	t.Helper()
	if addr := os.Getenv("DEVSTACK_COMPAT_REDIS"); addr != "" {
		rdb := redisClient(t, addr)
		require.NoError(t, rdb.FlushAll(context.Background()).Err())
		return addr
	}
	return startStack(t).RedisAddr
}

func startStack(t *testing.T) *Stack {
	t.Helper()
	s, err := start(context.Background(), Options{AnyPorts: true})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

func redisClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func claimed(claims []deadline.Claim) []string {
	var out []string
	for _, c := range claims {
		kind := "A"
		if c.Fresh {
			kind = "F"
		}
		out = append(out, fmt.Sprintf("%s/%s/%s/%d", c.Device, kind, c.Type, c.State.Deadline))
	}
	sort.Strings(out)
	return out
}

func TestDeadlineStoreOnStackRedis(t *testing.T) {
	rdb := redisClient(t, compatRedisAddr(t))
	ctx := context.Background()
	t0 := time.UnixMilli(1_763_800_000_000)
	clk := testenv.NewClock(t0)
	store := deadlinetest.NewStore(t, rdb, deadline.Options{Slots: 8, Now: clk.Now, Timeout: compatTimeout}, "default", "gateway", "sensor")
	ms := func(d time.Duration) int64 { return t0.Add(d).UnixMilli() }
	deadlineOf := func(id string) (int64, string) {
		t.Helper()
		d, found, err := store.Device(ctx, id)
		require.NoError(t, err)
		require.True(t, found, id)
		return d.Deadline.UnixMilli(), d.Type
	}
	claim := func(batch int) deadline.ClaimResult {
		t.Helper()
		res, err := store.Claim(ctx, testenv.AllSlots(8), deadline.ClaimOptions{Now: clk.Now(), Lease: 30 * time.Second, Batch: batch})
		require.NoError(t, err)
		return res
	}
	ack := func(acks ...deadline.Ack) []bool {
		t.Helper()
		applied, err := store.Acknowledge(ctx, acks)
		require.NoError(t, err)
		return applied
	}

	// Refresh: typed and untyped signals, a device twice in one batch, an out-of-order signal.
	require.NoError(t, store.Refresh(ctx, []deadline.Signal{
		{Device: "gw1", Type: "gateway", Seen: t0},
		{Device: "gw1", Type: "gateway", Seen: t0.Add(2 * time.Second)},
		{Device: "s1", Type: "sensor", Seen: t0},
		{Device: "d3", Seen: t0},
		{Device: "d8", Seen: t0.Add(time.Second)},
	}))
	require.NoError(t, store.Refresh(ctx, []deadline.Signal{{Device: "gw1", Type: "gateway", Seen: t0.Add(time.Second)}}))
	for id, want := range map[string]struct {
		dl  int64
		typ string
	}{"gw1": {ms(7 * time.Second), "gateway"}, "s1": {ms(15 * time.Second), "sensor"}, "d3": {ms(10 * time.Second), "default"}, "d8": {ms(11 * time.Second), "default"}} {
		dl, typ := deadlineOf(id)
		require.Equal(t, want.dl, dl, id)
		require.Equal(t, want.typ, typ, id)
	}
	// An untyped signal keeps the recorded type (ZSCORE and the score's type bits inside the script).
	// One script call then spans the slots of gw1 (4), d8 (2) and s1 (0).
	require.NoError(t, store.Refresh(ctx, []deadline.Signal{
		{Device: "gw1", Seen: t0.Add(3 * time.Second)}, {Device: "d8", Seen: t0.Add(time.Second)}, {Device: "s1", Seen: t0.Add(time.Second)},
	}))
	dl, typ := deadlineOf("gw1")
	require.Equal(t, ms(8*time.Second), dl)
	require.Equal(t, "gateway", typ)
	dl, typ = deadlineOf("s1")
	require.Equal(t, ms(16*time.Second), dl)
	require.Equal(t, "sensor", typ)
	dl, _ = deadlineOf("d8")
	require.Equal(t, ms(11*time.Second), dl)

	// Claim: only gw1 is due at t0+9s; the next deadline is d3's.
	clk.Set(t0.Add(9 * time.Second))
	res := claim(256)
	require.Equal(t, []string{fmt.Sprintf("gw1/F/gateway/%d", ms(8*time.Second))}, claimed(res.Claims))
	require.False(t, res.More)
	require.Equal(t, ms(10*time.Second), res.NextDeadline.UnixMilli())
	require.Equal(t, ms(39*time.Second), res.NextAlarm.UnixMilli(), "the claim's lease")
	gw1 := res.Claims[0]
	cur, err := store.CurrentDeadlines(ctx, asRepeats(res.Claims))
	require.NoError(t, err)
	require.True(t, cur[0].IsZero(), "gw1 is silent")

	// Acknowledge the interrupted event: reschedule the first repeat; an operator then acks.
	st := gw1.State
	st.Next, st.InterruptedAt = 1, clk.Now().UnixMilli()
	require.Equal(t, []bool{true}, ack(deadline.Ack{Device: "gw1", Slot: gw1.Slot, Op: deadline.Reschedule, Claimed: st.Deadline, Next: t0.Add(24 * time.Second), State: st}))
	ok, err := store.SetAcked(ctx, "gw1", 0)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = store.SetAcked(ctx, "never-seen", 0)
	require.NoError(t, err)
	require.False(t, ok)
	d, _, err := store.Device(ctx, "gw1")
	require.NoError(t, err)
	require.NotNil(t, d.Incident)
	require.True(t, d.Incident.Acked, "string.gsub set the acked flag")
	require.Equal(t, ms(24*time.Second), d.NextAct.UnixMilli())
	// A reschedule that does not know of the operator's ack keeps it (string.match + gsub in the ack script).
	require.Equal(t, []bool{true}, ack(deadline.Ack{Device: "gw1", Slot: gw1.Slot, Op: deadline.Reschedule, Claimed: st.Deadline, Dormant: true, State: st}))
	d, _, err = store.Device(ctx, "gw1")
	require.NoError(t, err)
	require.True(t, d.Incident.Acked)
	require.True(t, d.NextAct.IsZero(), "dormant: act time +inf")

	// Two devices fall due; a batch of one reports More.
	clk.Set(t0.Add(12 * time.Second))
	res = claim(1)
	require.Len(t, res.Claims, 1)
	require.True(t, res.More)
	first := res.Claims
	res = claim(256)
	all := append(first, res.Claims...)
	require.Equal(t, []string{fmt.Sprintf("d3/F/default/%d", ms(10*time.Second)), fmt.Sprintf("d8/F/default/%d", ms(11*time.Second))}, claimed(all))
	require.False(t, res.NextAlarm.IsZero())
	require.Equal(t, ms(16*time.Second), res.NextDeadline.UnixMilli(), "s1 is next; gw1's +inf act time is ignored")
	sort.Slice(all, func(i, j int) bool { return all[i].Device < all[j].Device })
	d3c, d8c := all[0], all[1]

	// d3 signals again: the recovery probe (ZADD XX LT CH) makes its alarm entry due; ZMSCORE sees it back.
	require.NoError(t, store.Refresh(ctx, []deadline.Signal{{Device: "d3", Seen: clk.Now()}}))
	cur, err = store.CurrentDeadlines(ctx, asRepeats(all))
	require.NoError(t, err)
	require.Equal(t, ms(22*time.Second), cur[0].UnixMilli())
	require.True(t, cur[1].IsZero())
	// An ack of d3's claim that reschedules it far away is overridden by its newer deadline (the ZSCORE
	// check in the ack script), so the scanner reports the recovery at once.
	require.Equal(t, []bool{true, false}, ack(
		deadline.Ack{Device: "d3", Slot: d3c.Slot, Op: deadline.Reschedule, Claimed: d3c.State.Deadline, Next: t0.Add(time.Hour), State: d3c.State},
		deadline.Ack{Device: "d8", Slot: d8c.Slot, Op: deadline.Remove, Claimed: d8c.State.Deadline - 1},
	))
	res = claim(256)
	require.Equal(t, []string{fmt.Sprintf("d3/A/default/%d", ms(10*time.Second))}, claimed(res.Claims))
	require.Equal(t, []bool{true, true}, ack(
		deadline.Ack{Device: "d3", Slot: d3c.Slot, Op: deadline.Remove, Claimed: d3c.State.Deadline},
		deadline.Ack{Device: "d8", Slot: d8c.Slot, Op: deadline.Park, Claimed: d8c.State.Deadline, State: deadline.State{Deadline: d8c.State.Deadline, Reason: "kafka: down"}},
	))
	d, _, err = store.Device(ctx, "d3")
	require.NoError(t, err)
	require.True(t, d.Online())
	d, _, err = store.Device(ctx, "d8")
	require.NoError(t, err)
	require.True(t, d.Parked)
	require.Equal(t, "kafka: down", d.Incident.Reason)

	// Queries: Count, List (ZSCAN/HSCAN, paging, type filter), CountByType.
	counts, err := store.Count(ctx)
	require.NoError(t, err)
	require.Equal(t, deadline.Counts{Online: 2, Interrupted: 2, Parked: 1, Pending: 1}, counts)
	var ids []string
	cursor := ""
	for page := 0; ; page++ {
		require.Less(t, page, 10, "List must end")
		devs, next, err := store.List(ctx, deadline.ListOptions{Limit: 1, Cursor: cursor})
		require.NoError(t, err)
		for _, d := range devs {
			ids = append(ids, d.ID+"/"+d.Type)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	sort.Strings(ids)
	require.Equal(t, []string{"d3/default", "s1/sensor"}, ids)
	devs, _, err := store.List(ctx, deadline.ListOptions{Interrupted: true, Type: "gateway"})
	require.NoError(t, err)
	require.Len(t, devs, 1)
	require.Equal(t, "gw1", devs[0].ID)
	online, interrupted, err := store.CountByType(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"default": 1, "sensor": 1}, online)
	require.Equal(t, map[string]int64{"default": 1, "gateway": 1}, interrupted)

	// Delete runs in MULTI/EXEC.
	ok, err = store.Delete(ctx, "s1")
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = store.Delete(ctx, "s1")
	require.NoError(t, err)
	require.False(t, ok)

	// After a script cache flush (a Redis restart, a failover) EVALSHA answers NOSCRIPT and the store
	// reloads the scripts.
	require.NoError(t, rdb.ScriptFlush(ctx).Err())
	require.NoError(t, store.Refresh(ctx, []deadline.Signal{{Device: "gw2", Type: "gateway", Seen: clk.Now()}}))
	dl, _ = deadlineOf("gw2")
	require.Equal(t, ms(17*time.Second), dl)
}

// A device signalling twice in one batch keeps its latest deadline whatever the order: Redis applies the
// members of one ZADD GT in turn.
func TestRefreshDuplicateInBatchOnStackRedis(t *testing.T) {
	rdb := redisClient(t, compatRedisAddr(t))
	ctx := context.Background()
	t0 := time.UnixMilli(1_763_800_000_000)
	store := deadlinetest.NewStore(t, rdb, deadline.Options{Slots: 4, Now: func() time.Time { return t0 }, Timeout: compatTimeout},
		"default", "gateway", "sensor")
	require.NoError(t, store.Refresh(ctx, []deadline.Signal{
		{Device: "later-first", Type: "gateway", Seen: t0.Add(time.Second)},
		{Device: "later-first", Type: "gateway", Seen: t0},
	}))
	d, _, err := store.Device(ctx, "later-first")
	require.NoError(t, err)
	require.Equal(t, t0.Add(6*time.Second).UnixMilli(), d.Deadline.UnixMilli())
}

func TestOwnershipOnStackRedis(t *testing.T) {
	rdb := redisClient(t, compatRedisAddr(t))
	store, err := deadline.New(rdb, deadline.Options{Slots: 8, Timeout: compatTimeout})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// A lease held by a replica that died lapses in real time (miniredis with ClockTTL), so the live replica
	// takes the slot over.
	require.NoError(t, rdb.Set(ctx, ownerKey(0), "dead-replica", 300*time.Millisecond).Err())
	own := scan.NewOwnership(store, scan.OwnershipOptions{ReplicaID: "r1", Heartbeat: 50 * time.Millisecond, SlotLease: 400 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- own.Run(ctx) }()
	require.Eventually(t, func() bool { return len(own.Slots()) == 8 }, 5*time.Second, 10*time.Millisecond)
	owner, err := rdb.Get(ctx, ownerKey(0)).Result()
	require.NoError(t, err)
	require.Equal(t, "r1", owner)
	ttl, err := rdb.PTTL(ctx, ownerKey(3)).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, time.Duration(0), "leases carry a TTL")

	cancel()
	require.NoError(t, <-done)
	n, err := rdb.Exists(context.Background(), ownerKey(3), ownerKey(0)).Result()
	require.NoError(t, err)
	require.Zero(t, n, "leases released on shutdown")
}

// ZADD naming one member twice is applied pair by pair, as Redis does (see zaddInOrder).
func TestZAddRepeatedMemberOnStackRedis(t *testing.T) {
	rdb := redisClient(t, compatRedisAddr(t))
	ctx := context.Background()
	tests := []struct {
		name    string
		initial float64 // 0: member absent
		args    []any
		want    float64 // 0: member absent afterwards
		reply   int64
	}{
		{"plain last wins", 0, []any{1, "m", 3, "m", 2, "m"}, 2, 1},
		{"GT new keeps highest", 0, []any{"GT", 6, "m", 5, "m"}, 6, 1},
		{"GT existing keeps highest", 4, []any{"GT", "CH", 6, "m", 5, "m"}, 6, 1},
		{"GT existing none higher", 7, []any{"GT", 6, "m", 5, "m"}, 7, 0},
		{"LT new keeps lowest", 0, []any{"LT", 5, "m", 6, "m"}, 5, 1},
		{"XX LT CH existing", 9, []any{"XX", "LT", "CH", 5, "m", 6, "m", 1, "other"}, 5, 1},
		{"XX absent", 0, []any{"XX", 5, "m", 6, "m"}, 0, 0},
		{"NX first wins", 0, []any{"NX", 5, "m", 6, "m"}, 5, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "zadd:" + tt.name
			if tt.initial != 0 {
				require.NoError(t, rdb.ZAdd(ctx, key, redis.Z{Score: tt.initial, Member: "m"}).Err())
			}
			reply, err := rdb.Do(ctx, append([]any{"ZADD", key}, tt.args...)...).Int64()
			require.NoError(t, err)
			require.Equal(t, tt.reply, reply)
			got, err := rdb.ZScore(ctx, key, "m").Result()
			if tt.want == 0 {
				require.ErrorIs(t, err, redis.Nil)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// asRepeats returns copies of claims as an alarm entry's claims would come (not fresh), which
// CurrentDeadlines re-checks with ZMSCORE; it skips fresh ones outside a doubling.
func asRepeats(claims []deadline.Claim) []deadline.Claim {
	out := append([]deadline.Claim(nil), claims...)
	for i := range out {
		out[i].Fresh = false
	}
	return out
}

// ownerKey is slot's lease key as internal/replicaset writes it (its keys.go), for a lease a replica
// that died left behind.
func ownerKey(slot int) string { return fmt.Sprintf("%s:owner:{%d}", config.DefaultKeyPrefix, slot) }
