package deadline_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// BenchmarkDeadlineOf is the Go side of timing one signal of a type timed by its timeout, the cost a
// schedule could add to every signal (docs/schedules.md), in one run: the store as before schedules
// (no Expected hook), the daemon's hook on a configuration without schedules, and on one where another
// type has a schedule.
func BenchmarkDeadlineOf(b *testing.B) {
	parse := func(yml string) *config.Policies {
		cfg, err := config.Parse([]byte(yml), func(string) (string, bool) { return "", false })
		require.NoError(b, err)
		return cfg.Policies()
	}
	plain := parse("types: {default: {timeout: 1m}, gateway: {timeout: 30s}}")
	scheduled := parse(`types: {default: {timeout: 1m}, gateway: {timeout: 30s}, meter: {schedule: "0 2 * * *"}}`)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"}) // never dialled: deadlineOf touches no Redis
	b.Cleanup(func() { _ = rdb.Close() })
	for _, c := range []struct {
		name     string
		pol      *config.Policies
		expected bool
	}{{"no-hook", plain, false}, {"hook-without-schedules", plain, true}, {"hook-with-a-scheduled-type", scheduled, true}} {
		opts := deadline.Options{Slots: 8, Timeout: func(typ string) time.Duration { p, _ := c.pol.Lookup(typ); return p.Timeout }}
		if c.expected {
			opts.Expected = c.pol.Expected
		}
		store, err := deadline.New(rdb, opts)
		require.NoError(b, err)
		seen := time.Now()
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, scheduled := store.DeadlineOf("gateway", seen); scheduled {
					b.Fatal("gateway has no schedule")
				}
			}
		})
	}
}

// BenchmarkRefreshBesideSchedules is the whole signal path (Store.Refresh on Redis) of types without
// intervals or a schedule, A/B in one run on the same devices and server: A on a configuration without
// any schedule, B on one where other types have quiet and active intervals and a schedule (the daemon's
// Expected hook installed), and A2, a second store like A, whose A2/A shows the run's noise. Each
// iteration refreshes one batch of 256 typed signals through all three, in rotating order; B/A is 1
// when such types pay nothing (docs/schedules.md).
func BenchmarkRefreshBesideSchedules(b *testing.B) {
	rdb := testenv.StartRedis(b).Client(b)
	parse := func(yml string) *config.Policies {
		cfg, err := config.Parse([]byte(yml), func(string) (string, bool) { return "", false })
		require.NoError(b, err)
		return cfg.Policies()
	}
	const types = `default: {timeout: 1m}, gateway: {timeout: 30s}, sensor: {timeout: 10m}`
	plain := parse("types: {" + types + "}")
	scheduled := parse(`time_intervals: [{name: night, time_intervals: [{times: [{start_time: "22:00", end_time: "24:00"}, {start_time: "00:00", end_time: "06:00"}]}]}]
types: {` + types + `, solar: {timeout: 10m, quiet: [night]}, shop: {timeout: 5m, active: [night]}, meter: {schedule: "0 2 * * *", grace: 30m}}`)
	storeOf := func(pol *config.Policies, expected bool) *deadline.Store {
		opts := deadline.Options{Slots: 64, Timeout: func(typ string) time.Duration { p, _ := pol.Lookup(typ); return p.Timeout }}
		if expected {
			opts.Expected = pol.Expected
		}
		st, err := deadline.New(rdb, opts)
		require.NoError(b, err)
		require.NoError(b, st.Load(context.Background(), pol.Names()...))
		return st
	}
	stores := []*deadline.Store{storeOf(plain, false), storeOf(scheduled, true), storeOf(plain, false)} // A, B, A2
	n := benchrig.SizeFromEnv("HB_BENCH_DEVICES", 100_000)
	preload(b, stores[0], n, time.Now(), time.Minute)
	batches := make([][]deadline.Signal, max(n/256, 1))
	for i := range batches {
		batches[i] = make([]deadline.Signal, 256)
		for j := range batches[i] {
			k := (i*256 + j) % n
			batches[i][j] = deadline.Signal{Device: benchDevice(k), Type: benchTypes[k%3]}
		}
	}
	ctx := context.Background()
	var took [3]time.Duration
	var batch []deadline.Signal
	k := 0
	for b.Loop() {
		for r := range stores {
			s := (k + r) % len(stores)
			batch = withSeen(batch, batches[k%len(batches)], time.Now(), true)
			start := time.Now()
			require.NoError(b, stores[s].Refresh(ctx, batch))
			took[s] += time.Since(start)
		}
		k++
	}
	b.ReportMetric(float64(took[0].Nanoseconds())/float64(256*k), "ns/signal-A")
	b.ReportMetric(float64(took[1].Nanoseconds())/float64(256*k), "ns/signal-B")
	b.ReportMetric(float64(took[1])/float64(took[0]), "B/A")
	b.ReportMetric(float64(took[2])/float64(took[0]), "A2/A")
}
