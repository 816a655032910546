package deadline_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// BenchmarkMarkEarlier measures the write of reported failures and offline messages (a Lua script that
// moves deadlines earlier, one call per batch on a standalone Redis) against the ordinary refresh (one
// ZADD GT per slot) in the same run, on one standalone Redis, in batches of 256 over distinct halves of
// one fleet: x-refresh is the cost of one mark in ordinary signals, as wall time and as Redis CPU
// (redis-x-refresh: the server's own CPU per operation, which holds on a busy host). Each iteration
// refreshes a batch, then marks one.
func BenchmarkMarkEarlier(b *testing.B) {
	rdb := testenv.StartRedis(b).Client(b)
	store, err := deadline.New(rdb, deadline.Options{Slots: 64, Timeout: timeoutOf})
	require.NoError(b, err)
	ctx := context.Background()
	require.NoError(b, store.Load(ctx, benchTypes...))
	n := benchrig.SizeFromEnv("HB_BENCH_DEVICES", 100_000)
	start := time.Now()
	preload(b, store, n, start, time.Minute)
	const batch = 256
	var refreshTook, markTook, refreshCPU, markCPU time.Duration
	signals := make([]deadline.Signal, batch)
	marks := make([]deadline.Mark, batch)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range batch {
			k := (i*batch + j) % (n / 2)
			seen := start.Add(time.Duration(i+1) * time.Millisecond)
			signals[j] = deadline.Signal{Device: benchDevice(2 * k), Type: benchTypes[(2*k)%3], Seen: seen}
			// Each pass moves the other half's deadlines a little earlier again, so every mark writes.
			marks[j] = deadline.Mark{Device: benchDevice(2*k + 1), At: seen, Deadline: start.Add(-time.Hour - time.Duration(i+1)*time.Millisecond),
				Cause: deadline.CauseOffline}
		}
		cpu0, t0 := testenv.ServerCPU(b, rdb), time.Now()
		require.NoError(b, store.Refresh(ctx, signals))
		t1, cpu1 := time.Now(), testenv.ServerCPU(b, rdb)
		res, err := store.MarkEarlier(ctx, marks)
		markTook += time.Since(t1)
		markCPU += testenv.ServerCPU(b, rdb) - cpu1
		refreshTook += t1.Sub(t0)
		refreshCPU += cpu1 - cpu0
		require.NoError(b, err)
		require.Equal(b, deadline.MarkMoved, res[batch-1], "every mark writes")
	}
	b.StopTimer()
	perSignal := float64(refreshTook.Nanoseconds()) / float64(b.N*batch)
	perMark := float64(markTook.Nanoseconds()) / float64(b.N*batch)
	b.ReportMetric(perMark, "ns/mark")
	b.ReportMetric(perSignal, "baseline-ns/signal")
	b.ReportMetric(perMark/perSignal, "x-refresh")
	b.ReportMetric(float64(markCPU)/float64(refreshCPU), "redis-x-refresh")
}
