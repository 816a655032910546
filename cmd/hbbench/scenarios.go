package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/pkg/deadline"
)

func init() {
	register("refresh", refreshScenario)
	register("memory", memoryScenario)
	register("keyspace-baseline", keyspaceBaseline)
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

// preload writes n devices whose deadlines are given by deadlineOf, 4096 per refresh.
func preload(ctx context.Context, st *deadline.Store, n int, seenOf func(i int) time.Time) error {
	batch := make([]deadline.Signal, 0, 4096)
	for i := range n {
		batch = append(batch, deadline.Signal{Device: deviceID(i), Type: benchTypes[i%len(benchTypes)], Seen: seenOf(i)})
		if len(batch) == cap(batch) || i == n-1 {
			if err := st.Refresh(ctx, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	return nil
}

// refreshLoad sends batches of 256 signals for devices [0, n) from workers goroutines until ctx ends and
// returns how many signals were written.
func refreshLoad(ctx context.Context, st *deadline.Store, n, workers int, typed bool, rate *atomic.Int64) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			batch := make([]deadline.Signal, 256)
			for ctx.Err() == nil {
				now := time.Now()
				for j := range batch {
					k := r.IntN(n)
					batch[j] = deadline.Signal{Device: deviceID(k), Seen: now}
					if typed {
						batch[j].Type = benchTypes[k%len(benchTypes)]
					}
				}
				if err := st.Refresh(ctx, batch); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				rate.Add(int64(len(batch)))
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// refreshScenario compares deadline.Refresh (batches of 256 over 64 slots, 4 in flight, as ingest sends
// them) with redis-benchmark's pipelined single-member ZADD GT on the same server.
func refreshScenario(e *env) error {
	n := max(e.devices, 100_000)
	st, err := newStore(e, 64, nil)
	if err != nil {
		return err
	}
	if err := preload(e.ctx, st, n, func(int) time.Time { return time.Now() }); err != nil {
		return err
	}
	base, err := e.redis.redisBenchmark("-P", "64", "-n", "1000000", "-r", strconv.Itoa(n), "zadd", "hb:bench", "GT", "__rand_int__", "m:__rand_int__")
	if err != nil {
		return err
	}
	e.add("refresh", "redis-benchmark -P 64 ZADD GT", base, "ops/s", "baseline, same run")
	for _, typed := range []bool{true, false} {
		var count atomic.Int64
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		start := time.Now()
		err := refreshLoad(ctx, st, n, 4, typed, &count)
		cancel()
		if err != nil {
			return err
		}
		rate := float64(count.Load()) / time.Since(start).Seconds()
		name := "deadline.Refresh typed"
		if !typed {
			name = "deadline.Refresh untyped"
		}
		e.add("refresh", name, rate, "signals/s", fmt.Sprintf("%.2fx baseline", rate/base))
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
	if err := preload(e.ctx, st, e.devices, func(int) time.Time { return time.Now() }); err != nil {
		return err
	}
	after, err := e.redis.usedMemory(e.ctx)
	if err != nil {
		return err
	}
	e.add("memory", "redis bytes per device", float64(after-before)/float64(e.devices), "B", fmt.Sprintf("%d devices, 64 slots", e.devices))
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return nil
}

// keyspaceBaseline measures the common alternative: one `SET key PX ttl` per device and a subscriber on
// Redis expired-key notifications. Redis notices an expired key only when it samples or touches it, so
// the notification comes late; the lateness is measured the same way as heartbeatd's.
func keyspaceBaseline(e *env) error {
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
	n := e.devices
	start := time.Now().Add(3 * time.Second)
	expiry := func(i int) time.Time { return start.Add(time.Duration(i) * e.window / time.Duration(n)) }
	lateness := make([]time.Duration, 0, n)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ch := sub.Channel(redis.WithChannelSize(100_000))
		timeout := time.NewTimer(e.window + time.Minute)
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
	reportLateness(e, "keyspace-baseline", lateness, n)
	return nil
}

// reportLateness adds p50/p99/max and the early and missing counts of a lateness sample.
func reportLateness(e *env, scenario string, lateness []time.Duration, expected int) {
	slices.Sort(lateness)
	pct := func(p float64) float64 {
		if len(lateness) == 0 {
			return 0
		}
		return float64(lateness[min(len(lateness)-1, int(p*float64(len(lateness))))].Microseconds()) / 1000
	}
	early := 0
	for _, l := range lateness {
		if l < 0 {
			early++
		}
	}
	e.add(scenario, "lateness p50", pct(0.50), "ms", "")
	e.add(scenario, "lateness p99", pct(0.99), "ms", "")
	e.add(scenario, "lateness max", pct(1), "ms", "")
	e.add(scenario, "early events", float64(early), "count", "must be 0")
	e.add(scenario, "missing events", float64(expected-len(lateness)), "count", fmt.Sprintf("of %d", expected))
}
