package history_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/history"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// The history's benchmarks, on a real redis-server, each against a baseline measured in the same run.
// Sizes come from the environment (the defaults keep `make test`'s -benchtime=1x short):
//
//	HB_BENCH_HISTORY_STORM=100000 go test -run '^$' -bench StormWithHistory -benchtime=1x ./internal/history/
//
// HB_BENCH_HISTORY_STORM (devices interrupted at once, then recovering; default 20k),
// HB_BENCH_HISTORY_DEVICES (devices with incidents for the memory figure; default 20k),
// HB_BENCH_AVAIL_DEVICES (devices with incidents in the window of GET /v1/availability; default 10k, the
// 1% of a 1M fleet), HB_BENCH_AVAIL_GROUPS (group values; default 100).

// BenchmarkStormWithHistory: the detection path as the daemon wires it, n devices interrupted at once and
// then recovering, once without the incident history and once with it recording from its consumer group
// of the events topic. Each iteration runs without, with, without again (A/B/A), so the two runs
// without give the A/A spread of the same moment (x-aa-interrupted: the second over the first).
// Reported: each run's figures and the ratios with history over the mean of the two without
// (x-baseline-…): until Kafka acknowledged every interrupted (the alarm path, target ≤ 1.1), until the
// history also held every one of them open (the storm's whole cost), the recovered events' p99; and how
// long after the last recovered was acknowledged the history had closed them all.
func BenchmarkStormWithHistory(b *testing.B) {
	n := benchrig.SizeFromEnv("HB_BENCH_HISTORY_STORM", 20_000)
	rdb := testenv.StartRedis(b).Client(b)
	r, err := benchrig.New(rdb, 2*n)
	require.NoError(b, err)
	b.Cleanup(r.Close)
	ctx := context.Background()
	var expiry [2]time.Duration // the first and the second run without
	var expiryHist, recorded, closedAfter time.Duration
	var p99, p99Hist time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		for run, with := range []bool{false, true, false} {
			if !with {
				res, err := r.Expiry(ctx, n, nil)
				require.NoError(b, err)
				lat, err := r.Recovered(ctx, n, nil)
				require.NoError(b, err)
				expiry[run/2] += res.Last.Sub(res.Deadline)
				p99 += benchrig.Quantile(lat, 0.99) / 2
				continue
			}
			// Each run on a new store and group: the runs flush Redis.
			h := history.New(history.Options{Client: rdb})
			stop, err := r.RecordHistory(ctx, h)
			require.NoError(b, err)
			res, err := r.Expiry(ctx, n, nil)
			require.NoError(b, err)
			awaitOpen(b, h, n)
			expiryHist, recorded = expiryHist+res.Last.Sub(res.Deadline), recorded+time.Since(res.Deadline)
			stop()
			h = history.New(history.Options{Client: rdb})
			stop, err = r.RecordHistory(ctx, h)
			require.NoError(b, err)
			lat, err := r.Recovered(ctx, n, nil)
			require.NoError(b, err)
			returned := time.Now()
			awaitOpen(b, h, 0)
			closedAfter += time.Since(returned)
			stop()
			p99Hist += benchrig.Quantile(lat, 0.99)
			incidents, _, err := h.Incidents(ctx, "device-0", 10, "")
			require.NoError(b, err)
			require.Len(b, incidents, 1, "the recovered device's incident is recorded")
			require.NotNil(b, incidents[0].Closed, "and closed")
		}
	}
	baseline := (expiry[0] + expiry[1]) / 2
	b.ReportMetric(baseline.Seconds()/float64(b.N), "s-interrupted-all")
	b.ReportMetric(expiry[1].Seconds()/expiry[0].Seconds(), "x-aa-interrupted")
	b.ReportMetric(expiryHist.Seconds()/float64(b.N), "history-s-interrupted-all")
	b.ReportMetric(expiryHist.Seconds()/baseline.Seconds(), "x-baseline-interrupted")
	b.ReportMetric(recorded.Seconds()/float64(b.N), "history-s-recorded-all")
	b.ReportMetric(recorded.Seconds()/baseline.Seconds(), "x-baseline-recorded")
	b.ReportMetric(benchrig.Ms(p99/time.Duration(b.N)), "recovered-p99-ms")
	b.ReportMetric(benchrig.Ms(p99Hist/time.Duration(b.N)), "history-recovered-p99-ms")
	b.ReportMetric(float64(p99Hist)/float64(p99), "x-baseline-recovered-p99")
	b.ReportMetric(benchrig.Ms(closedAfter/time.Duration(b.N)), "history-closed-all-after-ms")
}

// awaitOpen polls until the history counts n devices with an open incident, as GET /v1/stats?group_by=
// would answer.
func awaitOpen(b *testing.B, h *history.Store, n int) {
	b.Helper()
	require.Eventually(b, func() bool {
		open, err := h.OpenByGroup(context.Background(), "device_type")
		require.NoError(b, err)
		var total int64
		for _, c := range open {
			total += c
		}
		return total == int64(n)
	}, time.Minute, 5*time.Millisecond, "the history counts %d open incidents", n)
}

// BenchmarkIncidentBytes: what Redis grows by per stored incident (INFO used_memory after recording,
// less before: the keys, their expiries and the dictionaries' tables), for devices with 1 and with 10
// incidents; objects-B/incident is MEMORY USAGE of the incident keys alone, the part the device's
// value and key name explain. The figure is absolute (docs/benchmarks.md), its target ≤ 100 B.
func BenchmarkIncidentBytes(b *testing.B) {
	devices := benchrig.SizeFromEnv("HB_BENCH_HISTORY_DEVICES", 20_000)
	rdb := testenv.StartRedis(b).Client(b)
	ctx := context.Background()
	// The scripts and the connections are Redis's too, once: loaded before the first measurement.
	recordIncidents(b, history.New(history.Options{Client: rdb}), "", 10, 1, time.Now())
	for _, per := range []int{1, 10} {
		b.Run(fmt.Sprintf("incidents=%d", per), func(b *testing.B) {
			var grown, objects int64
			for range b.N {
				require.NoError(b, rdb.FlushAll(ctx).Err())
				before := testenv.UsedMemory(b, rdb)
				h := history.New(history.Options{Client: rdb})
				recordIncidents(b, h, "", devices, per, time.Now())
				grown, objects = testenv.UsedMemory(b, rdb)-before, memoryOf(b, rdb, "hb:history:*")
			}
			stored := float64(devices * per)
			b.ReportMetric(float64(grown)/stored, "B/incident")
			b.ReportMetric(float64(objects)/stored, "objects-B/incident")
		})
	}
}

// recordIncidents records per closed incidents of devices dev-0…, an hour apart and 5 min long each,
// the last ending before now, typed by group value (device i in group i mod groups, 0: one type).
func recordIncidents(b *testing.B, h *history.Store, typePrefix string, devices, per int, now time.Time) {
	b.Helper()
	ctx := context.Background()
	batch := make([]event.Event, 0, 512)
	flush := func() {
		for _, err := range history.Recording(okSink{}, h).Publish(ctx, batch) {
			require.NoError(b, err)
		}
		batch = batch[:0]
	}
	for i := range devices {
		dev := "dev-" + strconv.Itoa(i)
		typ := "meter"
		if typePrefix != "" {
			typ = typePrefix + strconv.Itoa(i%100)
		}
		for k := range per {
			dl := now.Add(-time.Duration(per-k)*time.Hour - time.Duration(i%3600)*time.Second)
			e := event.New(event.Interrupted, dev, typ, dl, dl.Add(-30*time.Second), dl, 0)
			r := event.New(event.Recovered, dev, typ, dl, dl.Add(-30*time.Second), dl.Add(5*time.Minute), 0)
			r.SilentForMs = (5*time.Minute + 30*time.Second).Milliseconds()
			batch = append(batch, e, r)
		}
		if len(batch) >= 500 {
			flush()
		}
	}
	flush()
}

// okSink takes every event, as a Kafka that acknowledges all.
type okSink struct{}

func (okSink) Publish(_ context.Context, events []event.Event) []error {
	return make([]error, len(events))
}

// memoryOf sums MEMORY USAGE (exact: SAMPLES 0) over the keys matching pattern.
func memoryOf(b *testing.B, rdb redis.UniversalClient, pattern string) int64 {
	b.Helper()
	ctx := context.Background()
	var total int64
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		n, err := rdb.MemoryUsage(ctx, iter.Val(), 0).Result()
		require.NoError(b, err)
		total += n
	}
	require.NoError(b, iter.Err())
	return total
}

// BenchmarkGroupAvailability: GET /v1/availability's query (7 days, by device_type) over devices with
// incidents in HB_BENCH_AVAIL_GROUPS types, against the same query over a tenth of them in the same
// Redis (x-tenth: how the cost grows with the devices that had incidents; the fleet's size plays no part).
func BenchmarkGroupAvailability(b *testing.B) {
	devices := benchrig.SizeFromEnv("HB_BENCH_AVAIL_DEVICES", 10_000)
	rdb := testenv.StartRedis(b).Client(b)
	ctx := context.Background()
	now := time.Now()
	full := history.New(history.Options{Client: rdb, KeyPrefix: "full"})
	tenth := history.New(history.Options{Client: rdb, KeyPrefix: "tenth"})
	recordIncidents(b, full, "type-", devices, 3, now)
	recordIncidents(b, tenth, "type-", devices/10, 3, now)
	q := history.GroupQuery{Window: 7 * 24 * time.Hour, GroupBy: "device_type"}
	var fullTook, tenthTook time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		groups, err := full.Groups(ctx, q)
		fullTook += time.Since(start)
		require.NoError(b, err)
		require.Len(b, groups, min(devices, 100))
		start = time.Now()
		_, err = tenth.Groups(ctx, q)
		tenthTook += time.Since(start)
		require.NoError(b, err)
	}
	b.ReportMetric(benchrig.Ms(fullTook/time.Duration(b.N)), "query-ms")
	b.ReportMetric(benchrig.Ms(tenthTook/time.Duration(b.N)), "tenth-query-ms")
	b.ReportMetric(float64(fullTook)/float64(tenthTook), "x-tenth")
}
