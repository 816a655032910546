package deadline_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/internal/testenv/deadlinetest"
)

func TestTypeRegistryIsSharedBetweenStores(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		require.NoError(t, f.Store.Load(ctx, "default", "gateway", "sensor", "brand-new-type"))
		f.Refresh(t, deadline.Signal{Device: "x", Type: "brand-new-type", Seen: f.Clock.Now()})
		other, err := deadline.New(f.RDB, deadline.Options{Slots: 8, Now: f.Clock.Now, Timeout: timeoutOf})
		require.NoError(t, err)
		d, _, err := other.Device(ctx, "x")
		require.NoError(t, err)
		require.Equal(t, "brand-new-type", d.Type, "a replica that never saw the name resolves it from Redis")
	})
}

func TestLoadRefusesMoreTypesThanFitInAScore(t *testing.T) {
	// Refused before Redis is asked anything: nothing listens there.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := deadline.New(rdb, deadline.Options{Slots: 8, Timeout: timeoutOf})
	require.NoError(t, err)
	names := make([]string, deadline.MaxTypes+1)
	for i := range names {
		names[i] = fmt.Sprint("type-", i)
	}
	require.ErrorContains(t, store.Load(context.Background(), names...), "1025 types: at most 1024 fit in a deadline score")
}

// TestOnlyConfiguredTypesAreRecorded floods the store with device-chosen type names: none reaches the
// registry or costs a script call, their devices get the default policy, and a name added to the
// configuration later takes effect from its device's next signal.
func TestOnlyConfiguredTypesAreRecorded(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	rdb := srv.Client(t)
	now := time.UnixMilli(1_763_800_000_000) // Refresh runs on this goroutine: a plain variable is the clock
	timeouts := map[string]time.Duration{"default": time.Minute, "gateway": 30 * time.Second, "random-7": time.Hour}
	store := deadlinetest.NewStore(t, rdb, deadline.Options{Slots: 8, Now: func() time.Time { return now },
		Timeout: testenv.TypeTimeouts(timeouts)}, "default", "gateway")
	scripts := scriptCounter(rdb)

	const names = 5000
	sigs := make([]deadline.Signal, 0, names+1)
	for i := range names {
		sigs = append(sigs, deadline.Signal{Device: fmt.Sprint("dev-", i), Type: fmt.Sprint("random-", i), Seen: now})
	}
	sigs = append(sigs, deadline.Signal{Device: "gw", Type: "gateway", Seen: now})
	for chunk := range slices.Chunk(sigs, 256) {
		require.NoError(t, store.Refresh(ctx, chunk))
	}
	require.Zero(t, scripts(), "a new name costs no script call")
	registry, err := rdb.HGetAll(ctx, store.Keys().Types()).Result()
	require.NoError(t, err)
	// Index 0 is the default type as older versions recorded it; a configured name is recorded with the
	// timeout its scores are written with (internal/typeindex, names.go).
	require.Equal(t, map[string]string{"default": "0", "default\x1f60000": "1", "gateway\x1f30000": "2"}, registry,
		"only configured names are recorded")
	mem, err := rdb.MemoryUsage(ctx, store.Keys().Types()).Result()
	require.NoError(t, err)
	t.Logf("type registry after %d device-chosen names: %d fields, %d bytes", names, len(registry), mem)

	device := func(id string) deadline.Device {
		t.Helper()
		d, found, err := store.Device(ctx, id)
		require.NoError(t, err)
		require.True(t, found, id)
		return d
	}
	require.Equal(t, "gateway", device("gw").Type, "configured types keep their policy")
	require.Equal(t, now.Add(30*time.Second).UnixMilli(), device("gw").Deadline.UnixMilli())
	d7 := device("dev-7")
	require.Equal(t, "default", d7.Type)
	require.Equal(t, now.Add(time.Minute).UnixMilli(), d7.Deadline.UnixMilli(), "an unknown name gets the default policy")

	// A reload adds random-7: its device's next signal records it, with its own timeout.
	require.NoError(t, store.Load(ctx, "default", "gateway", "random-7"))
	require.Equal(t, "default", device("dev-7").Type, "nothing changes before the device signals again")
	now = now.Add(time.Second)
	require.NoError(t, store.Refresh(ctx, []deadline.Signal{
		{Device: "dev-7", Type: "random-7", Seen: now},
		{Device: "dev-8", Type: "random-8", Seen: now},
	}))
	d7 = device("dev-7")
	require.Equal(t, "random-7", d7.Type)
	require.Equal(t, now.Add(time.Hour).UnixMilli(), d7.Deadline.UnixMilli())
	require.Equal(t, "default", device("dev-8").Type)
	registry, err = rdb.HGetAll(ctx, store.Keys().Types()).Result()
	require.NoError(t, err)
	require.Equal(t, map[string]string{"default": "0", "default\x1f60000": "1", "gateway\x1f30000": "2", "random-7\x1f3600000": "3"}, registry)

	// Untyped signals keep the recorded type, the added one included.
	now = now.Add(time.Second)
	require.NoError(t, store.Refresh(ctx, []deadline.Signal{{Device: "dev-7", Seen: now}, {Device: "gw", Seen: now}}))
	require.Equal(t, "random-7", device("dev-7").Type)
	require.Equal(t, now.Add(time.Hour).UnixMilli(), device("dev-7").Deadline.UnixMilli())
	require.Equal(t, now.Add(30*time.Second).UnixMilli(), device("gw").Deadline.UnixMilli())
}

// scriptCounter counts the scripts (EVALSHA or EVAL) the client sends from now on, but for the recovery
// probe, which a new device's first signal sends to learn whether it ended an incident (Refresh).
func scriptCounter(rdb redis.UniversalClient) func() int64 {
	h := &scriptCount{}
	rdb.AddHook(h)
	return h.n.Load
}

type scriptCount struct{ n atomic.Int64 }

func (h *scriptCount) count(cmds ...redis.Cmder) {
	for _, c := range cmds {
		if a := c.Args(); (c.Name() == "evalsha" || c.Name() == "eval") && a[1] != deadline.ProbeScriptHash {
			h.n.Add(1)
		}
	}
}

func (h *scriptCount) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scriptCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error { h.count(c); return next(ctx, c) }
}
func (h *scriptCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.count(cmds...); return next(ctx, cmds) }
}

// TestFullRegistryFallsBackToDefault: a registry an older version filled with device-chosen names has no
// index left for a newly configured type; its devices are watched under the default policy, and their
// signals do not ask Redis again.
func TestFullRegistryFallsBackToDefault(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.StartRedis(t).Client(t)
	store, err := deadline.New(rdb, deadline.Options{Slots: 8, Timeout: func(string) time.Duration { return time.Minute }})
	require.NoError(t, err)
	legacy := make([]any, 0, 2*deadline.MaxTypes)
	for i := range deadline.MaxTypes {
		name := fmt.Sprint("legacy-", i)
		if i == 0 {
			name = deadline.DefaultType
		}
		legacy = append(legacy, name, i)
	}
	require.NoError(t, rdb.HSet(ctx, store.Keys().Types(), legacy...).Err())
	require.NoError(t, store.Load(ctx, "default", "gateway"))
	scripts := scriptCounter(rdb)
	for i := range 3 {
		require.NoError(t, store.Refresh(ctx, []deadline.Signal{{Device: fmt.Sprint("gw-", i), Type: "gateway", Seen: time.Now()}}))
	}
	require.Zero(t, scripts())
	d, found, err := store.Device(ctx, "gw-0")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, deadline.DefaultType, d.Type)
}

// TestLate: a signal is late when its deadline under its type — the signal's, else the one recorded for
// the device (deadline or open incident), else default — is not after now.
func TestLate(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		claimOne(t, f, "inc") // an open incident of a gateway
		f.Refresh(t,
			deadline.Signal{Device: "g", Type: "gateway", Seen: f.Clock.Now()},
			deadline.Signal{Device: "s", Type: "sensor", Seen: f.Clock.Now()},
			deadline.Signal{Device: "d", Seen: f.Clock.Now()})
		f.Clock.Advance(45 * time.Second)
		ago := func(d time.Duration) time.Time { return f.Clock.Now().Add(-d) }
		cases := []struct {
			sig  deadline.Signal
			late bool
		}{
			{deadline.Signal{Device: "g", Seen: ago(40 * time.Second)}, true},    // recorded gateway: 30s
			{deadline.Signal{Device: "g", Seen: ago(20 * time.Second)}, false},   //
			{deadline.Signal{Device: "s", Seen: ago(40 * time.Second)}, false},   // recorded sensor: 10m
			{deadline.Signal{Device: "d", Seen: ago(60 * time.Second)}, true},    // recorded default: 60s, exactly due
			{deadline.Signal{Device: "inc", Seen: ago(35 * time.Second)}, true},  // the incident's gateway
			{deadline.Signal{Device: "new", Seen: ago(61 * time.Second)}, true},  // unknown device: default
			{deadline.Signal{Device: "new", Seen: ago(59 * time.Second)}, false}, //
			{deadline.Signal{Device: "x", Seen: ago(time.Second)}, false},        // younger than every timeout
			{deadline.Signal{Device: "x", Seen: ago(11 * time.Minute)}, true},    // older than every timeout
			{deadline.Signal{Device: "x", Type: "gateway", Seen: ago(31 * time.Second)}, true},
			{deadline.Signal{Device: "x", Type: "sensor", Seen: ago(31 * time.Second)}, false},
			{deadline.Signal{Device: "x", Type: "invented", Seen: ago(61 * time.Second)}, true}, // unconfigured: default
			{deadline.Signal{Device: "s", Type: "gateway", Seen: ago(40 * time.Second)}, true},  // the signal's type wins
		}
		sigs := make([]deadline.Signal, len(cases))
		want := make([]bool, len(cases))
		for i, c := range cases {
			sigs[i], want[i] = c.sig, c.late
		}
		got, err := f.Store.Late(ctx, sigs, nil)
		require.NoError(t, err)
		require.Equal(t, want, got)

		got, err = f.Store.Late(ctx, []deadline.Signal{{Device: "g", Seen: ago(time.Second)}, {Device: "s", Seen: ago(time.Minute)}}, nil)
		require.NoError(t, err)
		require.Nil(t, got, "none late")

		// Judged at receipt: a signal received on time and held (Redis down) is not late when written.
		got, err = f.Store.Late(ctx, []deadline.Signal{{Device: "g", Seen: ago(40 * time.Second)}, {Device: "x", Type: "gateway", Seen: ago(40 * time.Second)}},
			[]time.Time{ago(39 * time.Second), ago(5 * time.Second)})
		require.NoError(t, err)
		require.Equal(t, []bool{false, true}, got)
	})
}

// TestLateFindsTheTypeInTheOldSlot: while a doubling settles, a moved device's type is still recorded in
// its old slot.
func TestLateFindsTheTypeInTheOldSlot(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		dev := "moved-0"
		for i := 0; deadline.Slot(dev, 16) == deadline.Slot(dev, 8); i++ {
			dev = fmt.Sprint("moved-", i)
		}
		f.Refresh(t, deadline.Signal{Device: dev, Type: "gateway", Seen: f.Clock.Now()})
		_, err := f.Store.DoubleSlots(ctx)
		require.NoError(t, err)
		f.Clock.Advance(45 * time.Second)
		late, err := f.Store.Late(ctx, []deadline.Signal{{Device: dev, Seen: f.Clock.Now().Add(-40 * time.Second)}}, nil)
		require.NoError(t, err)
		require.Equal(t, []bool{true}, late, "gateway (30s), read from slot %d", deadline.Slot(dev, 8))
	})
}

// TestUntypedSignalOfARememberedDeviceReadsNothing: once a store wrote or read a device's type, the
// device's untyped signals are timed by it without asking Redis, and a store that never saw the device
// still reads it.
func TestUntypedSignalOfARememberedDeviceReadsNothing(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	f := setup(t, rdb, 8)
	f.Refresh(t, deadline.Signal{Device: "gw", Type: "gateway", Seen: f.Clock.Now()})
	later := func(d time.Duration) time.Time { f.Clock.Advance(d); return f.Clock.Now() }
	reads := func() int64 { return testenv.CommandStats(t, rdb)["zmscore"].Calls }
	before := reads()
	seen := later(time.Second)
	f.Refresh(t, deadline.Signal{Device: "gw", Seen: seen})
	require.Equal(t, before, reads(), "the type was remembered, not read")
	d, _ := f.device(t, "gw")
	require.Equal(t, "gateway", d.Type)
	require.Equal(t, seen.Add(30*time.Second), d.Deadline, "timed by the gateway timeout")

	other := fixtureStore(t, rdb, 8, f.Clock.Now, nil)
	seen = later(time.Second)
	require.NoError(t, other.Refresh(context.Background(), []deadline.Signal{{Device: "gw", Seen: seen}}))
	require.Equal(t, before+1, reads(), "a store that never saw the device reads its type once")
	require.NoError(t, other.Refresh(context.Background(), []deadline.Signal{{Device: "gw", Seen: later(time.Second)}}))
	require.Equal(t, before+1, reads(), "and then remembers it")
}

// TestTypeChangedByAnotherStoreReachesTheRememberingOne: a replica that remembers a device's type learns
// of a change another replica made, and of a delete, before its next batch is timed, so an untyped
// signal neither keeps nor writes back the old type.
func TestTypeChangedByAnotherStoreReachesTheRememberingOne(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		later := func(d time.Duration) time.Time { f.Clock.Advance(d); return f.Clock.Now() }
		other := fixtureStore(t, f.RDB, 8, f.Clock.Now, nil)
		f.Refresh(t, deadline.Signal{Device: "d", Type: "gateway", Seen: f.Clock.Now()})
		f.Refresh(t, deadline.Signal{Device: "d", Seen: later(time.Second)}) // remembered as a gateway

		require.NoError(t, other.Refresh(ctx, []deadline.Signal{{Device: "d", Type: "sensor", Seen: later(time.Second)}}))
		// The first batch after the change carries the log's count back; the one after applies it.
		f.Refresh(t, deadline.Signal{Device: "unrelated", Seen: f.Clock.Now()})
		seen := later(time.Second)
		f.Refresh(t, deadline.Signal{Device: "d", Seen: seen})
		d, _ := f.device(t, "d")
		require.Equal(t, "sensor", d.Type, "the other store's change stands")
		require.Equal(t, seen.Add(10*time.Minute), d.Deadline, "timed by the sensor timeout")

		found, err := other.Delete(ctx, "d")
		require.NoError(t, err)
		require.True(t, found)
		f.Refresh(t, deadline.Signal{Device: "unrelated", Seen: f.Clock.Now()})
		seen = later(time.Second)
		f.Refresh(t, deadline.Signal{Device: "d", Seen: seen})
		d, _ = f.device(t, "d")
		require.Equal(t, "default", d.Type, "a deleted device starts afresh with the default type")
		require.Equal(t, seen.Add(time.Minute), d.Deadline)
	})
}

// TestRememberedTypeIsReadAgainAfterItsTime: a change no log told of (Redis lost its data, an older
// replica) stands after typememory.Refresh at the latest.
func TestRememberedTypeIsReadAgainAfterItsTime(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		f.Refresh(t, deadline.Signal{Device: "d", Type: "gateway", Seen: f.Clock.Now()})
		later := func(d time.Duration) time.Time { f.Clock.Advance(d); return f.Clock.Now() }
		// Another writer records the sensor type without telling the log.
		sensor, err := f.Store.TypeIndex(context.Background(), "sensor")
		require.NoError(t, err)
		score := float64(f.Clock.Now().Add(10*time.Minute).UnixMilli()*deadline.MaxTypes + int64(sensor))
		require.NoError(t, f.RDB.ZAdd(context.Background(), f.Store.Keys().Deadlines(deadline.Slot("d", 8)), redis.Z{Score: score, Member: "d"}).Err())
		seen := later(11 * time.Minute)
		f.Refresh(t, deadline.Signal{Device: "d", Seen: seen})
		d, _ := f.device(t, "d")
		require.Equal(t, "sensor", d.Type)
		require.Equal(t, seen.Add(10*time.Minute), d.Deadline)
	})
}

// A per-device timeout that needs a type index when every one is taken is refused, naming the full
// registry: its device would otherwise be timed as the default type without a word.
func TestPerDeviceTimeoutRefusedWhenRegistryIsFull(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.StartRedis(t).Client(t)
	store, err := deadline.New(rdb, deadline.Options{Slots: 8, Timeout: func(string) time.Duration { return time.Minute }})
	require.NoError(t, err)
	require.NoError(t, store.Load(ctx, "default"))
	reg := func(dev string, timeout time.Duration) error {
		_, refused, err := store.Register(ctx, []string{dev}, []deadline.Registration{{Type: "default", TimeoutMs: timeout.Milliseconds()}}, []string{""})
		if len(refused) > 0 {
			return deadline.ErrTypesFull
		}
		return err
	}
	// Index 0 and the default type's own index are taken.
	for i := 1; i < deadline.MaxTypes-1; i++ {
		require.NoError(t, reg(fmt.Sprint("d", i), time.Duration(i)*time.Second))
	}
	err = reg("one-too-many", 7*time.Hour)
	require.ErrorIs(t, err, deadline.ErrTypesFull)
	_, found, err := store.Device(ctx, "one-too-many")
	require.NoError(t, err)
	require.False(t, found, "nothing of the refused registration is stored")
	require.NoError(t, reg("d1-again", time.Second), "a timeout that has its index still registers")

	// In a batch (an import), the refused row stops nothing around it.
	added, refused, err := store.Register(ctx, []string{"before", "needs-an-index", "after"}, []deadline.Registration{
		{Type: "default"}, {Type: "default", TimeoutMs: (8 * time.Hour).Milliseconds()}, {Type: "default"}}, make([]string, 3))
	require.NoError(t, err)
	require.Equal(t, []int{1}, refused)
	require.Equal(t, 2, added, "the rows around the refused one are expected from now on")
	_, found, err = store.Device(ctx, "needs-an-index")
	require.NoError(t, err)
	require.False(t, found)
}
