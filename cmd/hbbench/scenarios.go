package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

func init() {
	register("refresh", refreshScenario)
	register("memory", memoryScenario)
	register("ingest", ingestScenario)
	register("lateness", latenessScenario)
	register("expiry", expiryScenario)
	register("storm", stormScenario)
	register("recovered", recoveredScenario)
	register("rss", rssScenario)
	register("cost", costScenario)
	register("daemon-cpu", daemonCPUScenario)
	register("idle", idleScenario)
}

var benchTypes = []string{"default", "gateway", "sensor"}

func benchTimeout(name string) time.Duration {
	switch name {
	case "gateway":
		return 30 * time.Second
	case "sensor":
		return 10 * time.Minute
	}
	return time.Minute
}

func newStore(e *env, slots int, now func() time.Time) (*deadline.Store, error) {
	st, err := deadline.New(e.redis.client, deadline.Options{Slots: slots, Timeout: benchTimeout, Now: now})
	if err != nil {
		return nil, err
	}
	return st, st.Load(e.ctx, benchTypes...)
}

func deviceID(i int) string { return "device-" + strconv.Itoa(i) }

// preload writes n devices of the bench types that last signalled now, 4096 per refresh.
func preload(ctx context.Context, st *deadline.Store, n int) error {
	return benchrig.RefreshBatches(ctx, st, 4096, n, func(i int) deadline.Signal {
		return deadline.Signal{Device: deviceID(i), Type: benchTypes[i%len(benchTypes)], Seen: time.Now()}
	})
}

// refreshScenario compares deadline.Refresh (batches of 256 over 64 slots, 4 in flight, as ingest sends
// them) with redis-benchmark's pipelined single-member ZADD GT on the same server.
func refreshScenario(e *env) error {
	n := e.opts.Devices
	st, err := newStore(e, 64, nil)
	if err != nil {
		return err
	}
	if err := preload(e.ctx, st, n); err != nil {
		return err
	}
	// As many requests as redis-benchmark sends in about -duration at ≈300k/s (docs/benchmarks.md).
	requests := max(20_000, int(300_000*e.opts.Duration.Seconds()))
	// The baseline runs before and again after the measured runs, on an emptied key, and the ratios use
	// the mean: a shared machine's speed drifts within a run.
	baseline := func(key string) (float64, error) {
		rate, err := e.redis.redisBenchmark(e.ctx, "-P", "64", "-n", strconv.Itoa(requests), "-r", strconv.Itoa(n), "zadd", key, "GT", "__rand_int__", "m:__rand_int__")
		if err != nil {
			return 0, err
		}
		return rate, e.redis.client.Del(e.ctx, key).Err()
	}
	before, err := baseline("hb:bench")
	if err != nil {
		return err
	}
	// The same command on a key that already holds the fleet, as the deadlines sets do: an update that
	// moves a member in a large sorted set costs Redis more than one into a small or growing one.
	if err := fillZSet(e.ctx, e.redis.client, "hb:bench:full", n); err != nil {
		return err
	}
	warm, err := baseline("hb:bench:full")
	if err != nil {
		return err
	}
	// Both orders of arrival (see docs/benchmarks.md): a fixed-period fleet's signals move
	// the members nearest the head of each skip list, a random one's members from anywhere.
	type refreshCase struct {
		name            string
		typed, periodic bool
	}
	cases := []refreshCase{
		// Periodic first: a random pass leaves no order for a periodic one to follow.
		{"deadline.Refresh typed, periodic", true, true}, {"deadline.Refresh untyped, periodic", false, true},
		{"deadline.Refresh typed, random", true, false}, {"deadline.Refresh untyped, random", false, false},
	}
	rates := make([]float64, len(cases))
	for i, c := range cases {
		var count atomic.Int64
		ctx, cancel := context.WithTimeout(e.ctx, e.opts.Duration)
		start := time.Now()
		l := benchrig.Load{Prefix: "device-", Fleet: n, Workers: 4, Periodic: c.periodic}
		if c.typed {
			l.Types = benchTypes
		}
		err := benchrig.RefreshLoad(ctx, st, l, &count)
		cancel()
		if err != nil {
			return err
		}
		rates[i] = float64(count.Load()) / time.Since(start).Seconds()
	}
	after, err := baseline("hb:bench")
	if err != nil {
		return err
	}
	base := (before + after) / 2
	e.add("refresh", "redis-benchmark -P 64 ZADD GT", base, "ops/s", fmt.Sprintf("baseline, same run, key emptied first: mean of %.0f before and %.0f after the runs below", before, after))
	e.add("refresh", "redis-benchmark -P 64 ZADD GT, full key", warm, "ops/s", fmt.Sprintf("baseline, same run; key preloaded with %d members", n))
	for i, c := range cases {
		e.add("refresh", c.name, rates[i], "signals/s", fmt.Sprintf("%.2fx baseline, %.2fx full-key baseline", rates[i]/base, rates[i]/warm))
	}
	return nil
}

// fillZSet writes members m:0 … m:n-1 with random scores below n into key, as redis-benchmark -r n would
// name them, in pipelined batches.
func fillZSet(ctx context.Context, rdb *redis.Client, key string, n int) error {
	const batch = 1000
	for i := 0; i < n; i += batch {
		members := make([]redis.Z, 0, batch)
		for j := i; j < min(n, i+batch); j++ {
			members = append(members, redis.Z{Score: float64(rand.IntN(n)), Member: fmt.Sprintf("m:%012d", j)})
		}
		if err := rdb.ZAdd(ctx, key, members...).Err(); err != nil {
			return fmt.Errorf("fill %s: %w", key, err)
		}
	}
	return nil
}

func memoryScenario(e *env) error {
	st, err := newStore(e, 64, nil)
	if err != nil {
		return err
	}
	before, err := e.redis.usedMemory(e.ctx)
	if err != nil {
		return err
	}
	if err := preload(e.ctx, st, e.opts.Devices); err != nil {
		return err
	}
	after, err := e.redis.usedMemory(e.ctx)
	if err != nil {
		return err
	}
	e.add("memory", "redis bytes per device", float64(after-before)/float64(e.opts.Devices), "B", fmt.Sprintf("%d devices, 64 slots; goal ≤ 160", e.opts.Devices))
	return nil
}

// keyspaceBaseline measures the common alternative: one `SET key PX ttl` per device and a subscriber on
// Redis expired-key notifications, with -devices keys expiring evenly over -window. Redis notices an
// expired key only when it samples or touches it, so the notification comes late; the lateness is
// measured the same way as heartbeatd's and reported under scenario with metrics named prefix+"...".
func keyspaceBaseline(e *env, scenario, prefix string) error {
	rdb := e.redis.client
	if err := rdb.ConfigSet(e.ctx, "notify-keyspace-events", "Ex").Err(); err != nil {
		return err
	}
	defer rdb.ConfigSet(context.WithoutCancel(e.ctx), "notify-keyspace-events", "")
	sub := rdb.Subscribe(e.ctx, "__keyevent@0__:expired")
	defer sub.Close()
	if _, err := sub.Receive(e.ctx); err != nil {
		return err
	}
	n, window := e.opts.Devices, e.opts.Window
	start := benchrig.FirstDeadline(n).Add(time.Second)
	expiry := func(i int) time.Time { return start.Add(time.Duration(i) * window / time.Duration(n)) }
	lateness := make([]time.Duration, 0, n)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ch := sub.Channel(redis.WithChannelSize(100_000))
		timeout := time.NewTimer(time.Until(start) + window + time.Minute)
		defer timeout.Stop()
		for len(lateness) < n {
			select {
			case msg := <-ch:
				at := time.Now()
				i, err := strconv.Atoi(strings.TrimPrefix(msg.Payload, "ks:"))
				if err == nil {
					lateness = append(lateness, at.Sub(expiry(i)))
				}
			case <-timeout.C:
				return
			case <-e.ctx.Done():
				return
			}
		}
	}()
	pipe := rdb.Pipeline()
	for i := range n {
		pipe.Set(e.ctx, "ks:"+strconv.Itoa(i), "1", time.Until(expiry(i)))
		if i%4096 == 4095 || i == n-1 {
			if _, err := pipe.Exec(e.ctx); err != nil {
				return err
			}
		}
	}
	<-done
	reportLateness(e, scenario, prefix, lateness, n)
	return e.ctx.Err()
}

// reportLateness adds p50/p99/max and the early and missing counts of a lateness sample.
func reportLateness(e *env, scenario, prefix string, lateness []time.Duration, expected int) {
	slices.Sort(lateness)
	pct := func(q float64) float64 { return benchrig.Ms(benchrig.Quantile(lateness, q)) }
	early := 0
	for _, l := range lateness {
		if l < 0 {
			early++
		}
	}
	e.add(scenario, prefix+"lateness p50", pct(0.50), "ms", "baseline, same run")
	e.add(scenario, prefix+"lateness p99", pct(0.99), "ms", "")
	e.add(scenario, prefix+"lateness max", pct(1), "ms", "")
	e.add(scenario, prefix+"early events", float64(early), "count", "")
	e.add(scenario, prefix+"missing events", float64(expected-len(lateness)), "count", fmt.Sprintf("of %d", expected))
}
