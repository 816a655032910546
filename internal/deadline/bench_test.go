package deadline_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// benchDevices is the fleet size the benchmarks preload: HB_BENCH_DEVICES, default 1M. `make test` runs
// the benchmarks once at a small size so they keep compiling and working.
func benchDevices() int { return benchrig.SizeFromEnv("HB_BENCH_DEVICES", 1_000_000) }

var benchTypes = []string{"default", "gateway", "sensor"}

// preload writes n devices whose last signals spread evenly over the spread before seen (0: all at seen).
func preload(b *testing.B, store *deadline.Store, n int, seen time.Time, spread time.Duration) {
	b.Helper()
	preloadLinked(b, store, n, seen, spread, nil)
}

// preloadLinked is preload with device i naming parentOf(i) as its parent (nil: none does).
func preloadLinked(b *testing.B, store *deadline.Store, n int, seen time.Time, spread time.Duration, parentOf func(i int) string) {
	b.Helper()
	ctx := context.Background()
	batch := make([]deadline.Signal, 0, 4096)
	for i := range n {
		at := seen.Add(-spread * time.Duration(i) / time.Duration(n))
		batch = append(batch, deadline.Signal{Device: benchDevice(i), Type: benchTypes[i%3], Seen: at})
		if parentOf != nil {
			batch[len(batch)-1].Parent = parentOf(i)
		}
		if len(batch) == cap(batch) || i == n-1 {
			require.NoError(b, store.Refresh(ctx, batch))
			batch = batch[:0]
		}
	}
}

// BenchmarkRefresh moves deadlines of a present fleet in batches of 256 signals (types known, as ingest
// sends them), on a standalone server and on a 3-master Redis Cluster, and compares with redis-benchmark's
// pipelined single-member ZADD GT on one Redis process of the same deployment (on the cluster: the master
// holding the benchmark's key, so x-baseline there is the cluster against one of its shards).
func BenchmarkRefresh(b *testing.B) { testenv.EachBackend(b, benchRefresh) }

func benchRefresh(b *testing.B, rdb redis.UniversalClient) {
	store, err := deadline.New(rdb, deadline.Options{Slots: 64, Timeout: timeoutOf})
	require.NoError(b, err)
	n := benchDevices()
	ctx := context.Background()
	require.NoError(b, store.Load(ctx, benchTypes...))
	// Last signals spread over the past minute, as a live fleet's are: one instant for the whole fleet
	// leaves each slot with three distinct scores, and Redis orders equal scores by member name, so every
	// skip-list step would compare device names.
	preload(b, store, n, time.Now(), time.Minute)
	// Every device of the fleet once per pass, each pass a permutation of it: a small set of devices
	// cycled over and over would keep Redis's working set in the CPU cache. Two orders of arrival:
	//   - periodic: every pass in the same order, as devices that signal at a fixed period and phase do;
	//     each signal moves the member with about the earliest deadline of its type, near the head of the
	//     slot's skip list, which stays in the CPU cache;
	//   - random: each pass in another order than the last (two permutations alternately), as devices
	//     that signal at random moments do; each signal moves a member from anywhere in the skip list,
	//     which costs Redis more (docs/benchmarks.md, "What limits it").
	batchesOf := func(order []int) [][]deadline.Signal {
		out := make([][]deadline.Signal, max(n/256, 1))
		for i := range out {
			out[i] = make([]deadline.Signal, 256)
			for j := range out[i] {
				k := order[(i*256+j)%n]
				out[i][j] = deadline.Signal{Device: fmt.Sprintf("device-%08d", k), Type: benchTypes[k%3]}
			}
		}
		return out
	}
	first, second := batchesOf(rand.Perm(n)), batchesOf(rand.Perm(n))
	for _, typed := range []bool{true, false} {
		name := "typed"
		if !typed {
			name = "untyped"
		}
		// The periodic case starts with an untimed pass in its order; the random case then starts with
		// the other order, so its first pass is random too.
		cases := []struct {
			order   string
			batches [][]deadline.Signal
			warm    bool
		}{
			{"periodic", first, true},
			{"random", append(append([][]deadline.Signal(nil), second...), first...), false},
		}
		for _, c := range cases {
			// The position in the cycle outlives the runs b.N's ramp makes, so the order holds across them.
			var next atomic.Int64
			warmed := !c.warm
			b.Run(name+"/"+c.order, func(b *testing.B) {
				if !warmed {
					b.StopTimer()
					for _, batch := range c.batches {
						require.NoError(b, store.Refresh(ctx, withSeen(nil, batch, time.Now(), typed)))
					}
					warmed = true
					b.StartTimer()
				}
				benchRefreshBatches(b, store, rdb, c.batches, &next, typed, n)
			})
		}
	}
}

// withSeen copies batch into dst (grown when short) seen at seen, without types when typed is false.
func withSeen(dst, batch []deadline.Signal, seen time.Time, typed bool) []deadline.Signal {
	out := append(dst[:0], batch...)
	for j := range out {
		out[j].Seen = seen
		if !typed {
			out[j].Type = ""
		}
	}
	return out
}

// benchRefreshBatches refreshes batches in turn, 4 in flight as ingest sends them (ingest.max_in_flight's
// default), and reports the rate beside redis-benchmark's.
func benchRefreshBatches(b *testing.B, store *deadline.Store, rdb redis.UniversalClient, batches [][]deadline.Signal, next *atomic.Int64, typed bool, n int) {
	ctx := context.Background()
	// RunParallel starts parallelism × GOMAXPROCS goroutines.
	b.SetParallelism(max(1, 4/runtime.GOMAXPROCS(0)))
	// The baseline runs right before and right after, and the ratio uses their mean: a shared machine's
	// speed drifts within a minute.
	b.StopTimer()
	before := redisBenchmarkZaddGT(b, rdb, n)
	b.StartTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var batch []deadline.Signal
		for pb.Next() {
			batch = withSeen(batch, batches[(next.Add(1)-1)%int64(len(batches))], time.Now(), typed)
			if err := store.Refresh(ctx, batch); err != nil {
				b.Error(err)
				return
			}
		}
	})
	rate := float64(b.N*256) / time.Since(start).Seconds()
	b.StopTimer()
	b.ReportMetric(rate, "signals/s")
	baseline := (before + redisBenchmarkZaddGT(b, rdb, n)) / 2
	b.ReportMetric(baseline, "baseline-zadd/s")
	b.ReportMetric(rate/baseline, "x-baseline")
}

// redisBenchmarkZaddGT runs `redis-benchmark -P 64 zadd k GT __rand_int__ m:__rand_int__` against rdb's
// server (on a cluster, the master owning k), its key emptied first, and returns its requests/s. The
// ratio to it is the figure the benchmark exists for, so a missing redis-benchmark (package redis-tools,
// which redis-server depends on) is testenv.Need's: a failure with CI=true.
func redisBenchmarkZaddGT(b *testing.B, rdb redis.UniversalClient, keyspace int) float64 {
	b.Helper()
	bin, err := testenv.LookPath("redis-benchmark")
	if err != nil {
		testenv.Need(b, "redis-benchmark", err)
	}
	const key = "hb:bench"
	var addr string
	switch c := rdb.(type) {
	case *redis.Client:
		addr = c.Options().Addr
	case *redis.ClusterClient:
		node, err := c.MasterForKey(context.Background(), key)
		require.NoError(b, err)
		addr = node.Options().Addr
	default:
		b.Fatalf("redis-benchmark baseline: unexpected client %T", rdb)
	}
	require.NoError(b, rdb.Del(context.Background(), key).Err())
	host, port, _ := strings.Cut(addr, ":")
	out, err := exec.Command(bin, "-h", host, "-p", port, "-P", "64", "-n", "300000", "-r", strconv.Itoa(keyspace), "-q",
		"zadd", key, "GT", "__rand_int__", "m:__rand_int__").Output()
	require.NoError(b, err, "redis-benchmark: %s", out)
	m := regexp.MustCompile(`([0-9.]+) requests per second`).FindStringSubmatch(string(out))
	if m == nil {
		b.Fatalf("redis-benchmark output not understood: %q", out)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// BenchmarkClaim drains 100k due devices (at most the fleet size) in batches of 256 over 64 slots,
// acknowledging nothing: the claim path alone. loops=1 claims over all slots in one pipeline at a time;
// loops=4 claims as the daemon does by default (detection.scanners: 4 loops, each over the slots
// congruent to its index mod 4), so decoding one reply overlaps Redis running another loop's scripts.
// held is loops=4 after a blind window that still holds the longest type (hold-back): the other types'
// devices are claimed by their own watermark, past the fleet's; the held third stays put. redis-µs/claim
// is Redis's own time per claim (INFO commandstats), which other load on the host hardly moves.
func BenchmarkClaim(b *testing.B) {
	srv := testenv.StartRedis(b)
	rdb := srv.Client(b)
	store, err := deadline.New(rdb, deadline.Options{Slots: 64, Timeout: timeoutOf})
	require.NoError(b, err)
	n := min(100_000, benchDevices())
	ctx := context.Background()
	for _, run := range []struct {
		loops int
		held  bool
	}{{1, false}, {4, false}, {4, true}} {
		loops := run.loops
		name := fmt.Sprintf("loops=%d", loops)
		if run.held {
			name += "/held"
		}
		b.Run(name, func(b *testing.B) {
			shares := make([][]int, loops)
			for _, slot := range testenv.AllSlots(64) {
				shares[slot%loops] = append(shares[slot%loops], slot)
			}
			var claimed atomic.Int64
			var elapsed time.Duration
			var redisTime int64
			for b.Loop() {
				b.StopTimer()
				require.NoError(b, rdb.FlushAll(ctx).Err())
				if run.held { // three types, so one can be held
					store, err = deadline.New(rdb, deadline.Options{Slots: 64, Timeout: timeoutOf})
					require.NoError(b, err)
					require.NoError(b, store.Load(ctx, benchTypes...))
				}
				preload(b, store, n, time.Now().Add(-time.Hour), 0)
				require.NoError(b, rdb.ConfigResetStat(ctx).Err())
				b.StartTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for _, share := range shares {
					wg.Go(func() {
						for {
							opts := deadline.ClaimOptions{Now: time.Now(), Lease: time.Hour, Batch: 256}
							if run.held {
								opts.WatermarkFor = holdLongest(opts.Now)
							}
							res, err := store.Claim(ctx, share, opts)
							if err != nil {
								b.Error(err)
								return
							}
							claimed.Add(int64(len(res.Claims)))
							if !res.More {
								return
							}
						}
					})
				}
				wg.Wait()
				elapsed += time.Since(start)
				redisTime += redisUsec(b, rdb)
			}
			want := n
			if run.held {
				want = n - heldDevices(n)
			}
			if got := claimed.Load(); got != int64(want*b.N) {
				b.Fatalf("claimed %d, want %d", got, want*b.N)
			}
			b.ReportMetric(float64(claimed.Load())/elapsed.Seconds(), "claims/s")
			b.ReportMetric(float64(redisTime)/float64(claimed.Load()), "redis-µs/claim")
		})
	}
}

// holdLongest is hold-back two hours after a blind window: the sensors (10 min, the longest timeout of
// benchTypes) are held, the others claimable now.
func holdLongest(now time.Time) deadline.WatermarkFunc {
	return func(timeout time.Duration) time.Time {
		if timeout >= timeoutOf("sensor") {
			return now.Add(-2 * time.Hour)
		}
		return now
	}
}

// heldDevices is how many of preload's n devices are sensors.
func heldDevices(n int) int { return (n + 1) / 3 }

// BenchmarkMemoryPerDevice reports Redis memory per device (INFO memory used_memory, minus the empty
// server's) for a fleet of benchDevices over 64 slots. no-parent: devices that name no parent, which pay
// nothing for the parent links. with-parent: the same fleet, then the same signals again each naming one
// of benchDevices/100 gateways (100 devices behind each); link-bytes/device is what the links add.
func BenchmarkMemoryPerDevice(b *testing.B) {
	srv := testenv.StartRedis(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	n := benchDevices()
	for _, linked := range []bool{false, true} {
		name := "no-parent"
		if linked {
			name = "with-parent"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				require.NoError(b, rdb.FlushAll(ctx).Err())
				// A new store each time: one remembers the links it wrote, and the flush removed them.
				store, err := deadline.New(rdb, deadline.Options{Slots: 64, Timeout: timeoutOf})
				require.NoError(b, err)
				before := usedMemory(b, srv)
				seen := time.Now()
				b.StartTimer()
				preload(b, store, n, seen, 0)
				b.StopTimer()
				plain := usedMemory(b, srv)
				if !linked {
					b.ReportMetric(float64(plain-before)/float64(n), "bytes/device")
					b.StartTimer()
					continue
				}
				b.StartTimer()
				preloadLinked(b, store, n, seen, 0, func(i int) string { return benchGateway(i / 100) })
				b.StopTimer()
				after := usedMemory(b, srv)
				b.ReportMetric(float64(after-before)/float64(n), "bytes/device")
				b.ReportMetric(float64(after-plain)/float64(n), "link-bytes/device")
				b.StartTimer()
			}
		})
	}
}

func benchDevice(i int) string  { return fmt.Sprintf("device-%08d", i) }
func benchGateway(i int) string { return fmt.Sprintf("gw-%06d", i) }

// BenchmarkParentSignal: what naming a parent costs Store.Refresh. Each iteration times one pass over a
// fleet of benchDevices without parents (the baseline) and one pass in which the case's devices name
// their gateway (100 devices behind each), in the fleet's order, batches of 256 typed signals, 4 in
// flight (BenchmarkRefresh's typed periodic case):
//   - remembered: every 10th device names its gateway, and the store wrote these links before: a
//     signal repeating a remembered link writes nothing more than one without a parent;
//   - first-write: every 10th device names a gateway it never named before (another each pass), so
//     each of these signals writes its link;
//   - whole-fleet: every device names its gateway, as remembered; the store remembers fewer links than
//     a fleet of 1M has, so the signals write those it forgot.
//
// extra-ns/linked is the time a pass took beyond the baseline's, per signal naming a parent;
// link-writes/linked is Redis's link swaps (EVAL of the link script) per such signal (0 when
// remembered, 1 when written).
func BenchmarkParentSignal(b *testing.B) {
	srv := testenv.StartRedis(b)
	rdb := srv.Client(b)
	store, err := deadline.New(rdb, deadline.Options{Slots: 64, Timeout: timeoutOf})
	require.NoError(b, err)
	ctx := context.Background()
	require.NoError(b, store.Load(ctx, benchTypes...))
	n := benchDevices()
	preload(b, store, n, time.Now(), time.Minute)
	base := fleetBatches(n, nil)
	pass := 0
	cases := []struct {
		name  string
		every int  // device i names a gateway when i%every == 0
		fresh bool // another gateway each pass
	}{{"remembered", 10, false}, {"first-write", 10, true}, {"whole-fleet", 1, false}}
	for _, c := range cases {
		parentOf := func(i int) string {
			if i%c.every != 0 {
				return ""
			}
			if c.fresh {
				return fmt.Sprintf("gw-%d-%06d", pass, i/(100*c.every))
			}
			return benchGateway(i / (100 * c.every))
		}
		linked := (n + c.every - 1) / c.every
		b.Run(c.name, func(b *testing.B) {
			b.StopTimer()
			batches := fleetBatches(n, parentOf)
			if !c.fresh {
				refreshPass(b, store, batches) // the links written and remembered before the timed passes
			}
			var elapsed, baseline time.Duration
			var writes int64
			b.StartTimer()
			for b.Loop() {
				b.StopTimer()
				if c.fresh {
					pass++
					batches = fleetBatches(n, parentOf)
				}
				baseline += refreshPass(b, store, base)
				swaps := evalCalls(b, rdb)
				b.StartTimer()
				elapsed += refreshPass(b, store, batches)
				b.StopTimer()
				writes += evalCalls(b, rdb) - swaps
				b.StartTimer()
			}
			b.ReportMetric(float64(b.N*n)/elapsed.Seconds(), "signals/s")
			b.ReportMetric(float64(b.N*n)/baseline.Seconds(), "baseline-signals/s")
			b.ReportMetric(baseline.Seconds()/elapsed.Seconds(), "x-no-parent")
			b.ReportMetric(float64(elapsed-baseline)/float64(b.N*linked), "extra-ns/linked")
			b.ReportMetric(float64(writes)/float64(b.N*linked), "link-writes/linked")
		})
	}
}

// fleetBatches is one pass over devices 0..n-1 in their order, in batches of 256 typed signals, device i
// naming parentOf(i) (nil: none does).
func fleetBatches(n int, parentOf func(i int) string) [][]deadline.Signal {
	out := make([][]deadline.Signal, 0, (n+255)/256)
	for i := 0; i < n; i += 256 {
		batch := make([]deadline.Signal, 0, 256)
		for k := i; k < min(n, i+256); k++ {
			s := deadline.Signal{Device: benchDevice(k), Type: benchTypes[k%3]}
			if parentOf != nil {
				s.Parent = parentOf(k)
			}
			batch = append(batch, s)
		}
		out = append(out, batch)
	}
	return out
}

// refreshPass refreshes every batch once, seen now, 4 in flight (ingest.max_in_flight's default), and
// returns how long that took.
func refreshPass(b *testing.B, store *deadline.Store, batches [][]deadline.Signal) time.Duration {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 4 {
		wg.Go(func() {
			var batch []deadline.Signal
			for k := next.Add(1) - 1; k < int64(len(batches)); k = next.Add(1) - 1 {
				batch = withSeen(batch, batches[k], time.Now(), true)
				if err := store.Refresh(ctx, batch); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// evalCalls is how often Redis ran EVAL (INFO commandstats): a typed signal's only EVAL is its link's
// swap.
func evalCalls(b *testing.B, rdb redis.UniversalClient) int64 {
	return testenv.CommandStats(b, rdb)["eval"].Calls
}

func usedMemory(b *testing.B, srv *testenv.Redis) int64 { return testenv.UsedMemory(b, srv.Client(b)) }
