package alarm_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/eventrec"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/alarm"
	"github.com/heartbeatd/heartbeatd/pkg/config"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
	eventkafka "github.com/heartbeatd/heartbeatd/pkg/event/kafka"
)

// The benchmarks below run heartbeatd's detection path as the daemon wires it — a scanner over every slot
// handing claims to the alarm handler, which publishes to Kafka and then acknowledges in Redis — on a real
// redis-server and an in-process kfake broker, by the wall clock. Their figures are reported with
// b.ReportMetric and never asserted: a shared 2-core machine is too noisy for timed assertions.
//
// Sizes come from the environment so `make test` (-benchtime=1x) finishes in seconds with the defaults
// and a measurement can ask for more:
//
//	HB_BENCH_DEVICES=1000000 go test -run '^$' -bench DetectionLateness -benchtime=1x ./pkg/alarm/
//
// HB_BENCH_DEVICES (lateness fleet, default 100k), HB_BENCH_WINDOW (lateness spread, default 10s),
// HB_BENCH_REFRESH_RATE (signals/s of the concurrent refresh load, default 50k; 0 = as fast as it goes),
// HB_BENCH_EXPIRY_DEVICES (simultaneous expiry, default 100k), HB_BENCH_RECOVER_DEVICES (default 10k).

const benchTopic = "heartbeat.events"

// benchPolicyYAML: one type whose timeout outlasts every benchmark, so only the devices a benchmark
// schedules come due, and no repeats, so every device yields exactly one interrupted event.
const benchPolicyYAML = `
types:
  default: {timeout: 30s, repeat_every: 0s}
`

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v >= 0 {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// waitFor waits until n events of kind were acknowledged and returns every event so far.
func waitFor(tb testing.TB, rec *eventrec.Recorder, kind event.Kind, n int, timeout time.Duration) []eventrec.Published {
	tb.Helper()
	got, err := rec.Wait(context.Background(), kind, "", n, timeout)
	if err != nil {
		tb.Fatal(err)
	}
	return got
}

// rig is one redis-server, one kfake broker and the store, publisher and policies on them.
type rig struct {
	rdb      *redis.Client
	store    *deadline.Store
	sink     *eventrec.Recorder
	policies *config.Policies
}

// newRig starts the servers; expected is how many events one iteration records.
func newRig(b *testing.B, expected int) *rig {
	b.Helper()
	srv := testenv.StartRedis(b)
	kafka := testenv.StartKafka(b, testenv.KafkaOptions{Topics: []string{benchTopic}, Partitions: 12})
	cfg, err := config.Parse([]byte(benchPolicyYAML), func(string) (string, bool) { return "", false })
	require.NoError(b, err)
	r := &rig{rdb: srv.Client(b), policies: cfg.Policies()}
	timeout := func(typ string) time.Duration { p, _ := r.policies.Lookup(typ); return p.Timeout }
	repeat := func(typ string) time.Duration { p, _ := r.policies.Lookup(typ); return p.RepeatEvery }
	r.store, err = deadline.New(r.rdb, deadline.Options{Slots: config.DefaultSlots, Timeout: timeout, RepeatEvery: repeat})
	require.NoError(b, err)
	pub, err := eventkafka.NewPublisher(eventkafka.PublisherOptions{Brokers: kafka.Addrs, Topic: benchTopic})
	require.NoError(b, err)
	b.Cleanup(func() { _ = pub.Close() })
	r.sink = eventrec.New(pub, expected)
	r.reset(b)
	return r
}

// reset empties Redis and the sink between iterations.
func (r *rig) reset(b *testing.B) {
	b.Helper()
	ctx := context.Background()
	require.NoError(b, r.rdb.FlushAll(ctx).Err())
	require.NoError(b, r.store.Load(ctx, r.policies.Names()...))
	r.sink.Reset()
}

// timeout is the silence timeout of the benchmarks' one type.
func (r *rig) timeout() time.Duration { return r.policies.Default().Timeout }

// startScanner runs a scanner over every slot with the daemon's detection defaults, handing claims to an
// alarm handler; the returned function stops it and waits.
func (r *rig) startScanner(b *testing.B) (stop func()) {
	b.Helper()
	h := alarm.NewHandler(alarm.HandlerOptions{Store: r.store, Sink: r.sink, Policies: func() *config.Policies { return r.policies }})
	slots := make([]int, r.store.Slots())
	for i := range slots {
		slots[i] = i
	}
	sc := deadline.NewScanner(deadline.ScannerOptions{Store: r.store, Slots: func() []int { return slots }, Handle: h.Handle,
		MaxIdleWait: config.DefaultMaxIdleWait, Lease: config.DefaultLease, Batch: config.DefaultDetectionBatch,
		Concurrency: config.DefaultScanners})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sc.Run(ctx) }()
	return func() {
		cancel()
		require.NoError(b, <-done)
	}
}

// schedule writes devices 0..n-1 so that device i's deadline is deadlineOf(i), in batches of 4096
// typed signals.
func (r *rig) schedule(b *testing.B, prefix string, n int, deadlineOf func(i int) time.Time) {
	b.Helper()
	ctx := context.Background()
	batch := make([]deadline.Signal, 0, 4096)
	for i := range n {
		batch = append(batch, deadline.Signal{Device: prefix + strconv.Itoa(i), Type: "default", Seen: deadlineOf(i).Add(-r.timeout())})
		if len(batch) == cap(batch) || i == n-1 {
			require.NoError(b, r.store.Refresh(ctx, batch))
			batch = batch[:0]
		}
	}
}

// firstDeadline leaves time to schedule n devices before the first of them is due (measured ≈300k
// signals/s here; half that keeps a noisy machine clear of it).
func firstDeadline(n int) time.Time {
	return time.Now().Add(time.Second + time.Duration(n)*time.Second/150_000).Truncate(time.Millisecond)
}

// refreshLoad keeps deadlines of another fleet (busy-0..fleet-1, never due in a benchmark) moving at
// rate signals/s in typed batches of 256 from two workers, as ingest sends them, until ctx ends.
func (r *rig) refreshLoad(ctx context.Context, fleet, rate int, sent *atomic.Int64) error {
	const workers, size = 2, 256
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 1))
			batch := make([]deadline.Signal, size)
			for k := 0; ctx.Err() == nil; k++ {
				if rate > 0 {
					// Batch k of this worker is due at k·size·workers/rate.
					due := start.Add(time.Duration(k) * time.Duration(size*workers) * time.Second / time.Duration(rate))
					select {
					case <-ctx.Done():
						return
					case <-time.After(time.Until(due)):
					}
				}
				now := time.Now()
				for j := range batch {
					batch[j] = deadline.Signal{Device: "busy-" + strconv.Itoa(rnd.IntN(fleet)), Type: "default", Seen: now}
				}
				if err := r.store.Refresh(ctx, batch); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				sent.Add(size)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// ms is a duration in milliseconds with µs precision.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// quantile returns the q-quantile of sorted (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// BenchmarkDetectionLateness: HB_BENCH_DEVICES devices whose deadlines are spread evenly over
// HB_BENCH_WINDOW while a refresh load moves other devices' deadlines. Lateness is the event's time
// minus the deadline it reports (what detection_lateness_seconds observes); "acked" adds the publish to
// Kafka. Goal: p99 ≤ 50 ms, max ≤ 250 ms, never early.
func BenchmarkDetectionLateness(b *testing.B) {
	n := envInt("HB_BENCH_DEVICES", 100_000)
	window := envDuration("HB_BENCH_WINDOW", 10*time.Second)
	rate := envInt("HB_BENCH_REFRESH_RATE", 50_000)
	r := newRig(b, n)
	var lateness, acked []time.Duration
	var early, events int
	var spent time.Duration
	var signals atomic.Int64
	var loadTime time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		r.reset(b)
		t0 := firstDeadline(n)
		deadlineOf := func(i int) time.Time {
			return t0.Add(time.Duration(i) * window / time.Duration(n)).Truncate(time.Millisecond)
		}
		r.schedule(b, "device-", n, deadlineOf)
		require.True(b, time.Now().Before(t0), "scheduling %d devices outlasted the margin before the first deadline", n)
		stop := r.startScanner(b)
		ctx, cancel := context.WithCancel(context.Background())
		loadDone := make(chan error, 1)
		loadStart := time.Now()
		// Each load device refreshed about every 2 s, so none of it goes silent past its 30 s timeout
		// and gets counted among the measured devices (a 1M fleet at 50k/s left a fifth of it silent).
		fleet := max(10_000, min(n, 2*rate))
		go func() { loadDone <- r.refreshLoad(ctx, fleet, rate, &signals) }()
		b.StartTimer()
		got := waitFor(b, r.sink, event.Interrupted, n, window+time.Minute)
		b.StopTimer()
		cancel()
		require.NoError(b, <-loadDone)
		loadTime += time.Since(loadStart)
		stop()
		var last time.Time
		for _, p := range got {
			if p.Kind != event.Interrupted {
				continue
			}
			i, err := strconv.Atoi(p.DeviceID[len("device-"):])
			require.NoError(b, err)
			require.True(b, p.Deadline.Equal(deadlineOf(i)), "device %d: deadline %s, scheduled %s", i, p.Deadline, deadlineOf(i))
			l := p.At.Sub(p.Deadline)
			if l < 0 || p.AckedAt.Before(p.Deadline) {
				early++
			}
			lateness = append(lateness, l)
			acked = append(acked, p.AckedAt.Sub(p.Deadline))
			if p.AckedAt.After(last) {
				last = p.AckedAt
			}
		}
		events += n
		spent += last.Sub(t0)
	}
	slices.Sort(lateness)
	slices.Sort(acked)
	b.ReportMetric(ms(quantile(lateness, 0.5)), "p50-ms")
	b.ReportMetric(ms(quantile(lateness, 0.99)), "p99-ms")
	b.ReportMetric(ms(quantile(lateness, 1)), "max-ms")
	b.ReportMetric(ms(quantile(acked, 0.99)), "acked-p99-ms")
	b.ReportMetric(ms(quantile(acked, 1)), "acked-max-ms")
	b.ReportMetric(float64(early), "early")
	b.ReportMetric(float64(events)/spent.Seconds(), "events/s")
	b.ReportMetric(float64(signals.Load())/loadTime.Seconds(), "refresh-signals/s")
}

// BenchmarkSimultaneousExpiry: HB_BENCH_EXPIRY_DEVICES devices with one and the same deadline; the time
// from that deadline until Kafka acknowledged every interrupted event. Goal at 100k: ≤ 2 s.
func BenchmarkSimultaneousExpiry(b *testing.B) {
	n := envInt("HB_BENCH_EXPIRY_DEVICES", 100_000)
	r := newRig(b, n)
	var total time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		r.reset(b)
		d := firstDeadline(n)
		r.schedule(b, "device-", n, func(int) time.Time { return d })
		require.True(b, time.Now().Before(d), "scheduling %d devices outlasted the margin before the deadline", n)
		stop := r.startScanner(b)
		b.StartTimer()
		got := waitFor(b, r.sink, event.Interrupted, n, time.Minute)
		b.StopTimer()
		stop()
		var last time.Time
		for _, p := range got {
			require.False(b, p.At.Before(d), "early event")
			if p.AckedAt.After(last) {
				last = p.AckedAt
			}
		}
		total += last.Sub(d)
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s-to-all-acked")
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "events/s")
}

// BenchmarkRecoveredLatency: HB_BENCH_RECOVER_DEVICES interrupted devices signal again (untyped, as a
// device's message usually is), spread over two seconds in batches of 100; the time from each Refresh's
// return to Kafka acknowledging that device's recovered event. Goal: p99 ≤ 1 s.
func BenchmarkRecoveredLatency(b *testing.B) {
	n := envInt("HB_BENCH_RECOVER_DEVICES", 10_000)
	const size = 100
	r := newRig(b, 2*n) // interrupted, then recovered
	var latency []time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		r.reset(b)
		d := firstDeadline(n)
		r.schedule(b, "device-", n, func(int) time.Time { return d })
		stop := r.startScanner(b)
		waitFor(b, r.sink, event.Interrupted, n, time.Minute)
		r.sink.Reset()
		signalled := make(map[string]time.Time, n)
		ctx := context.Background()
		b.StartTimer()
		start := time.Now()
		batches := (n + size - 1) / size
		for k := range batches {
			time.Sleep(time.Until(start.Add(time.Duration(k) * 2 * time.Second / time.Duration(batches))))
			batch := make([]deadline.Signal, 0, size)
			for i := k * size; i < min(n, (k+1)*size); i++ {
				batch = append(batch, deadline.Signal{Device: "device-" + strconv.Itoa(i), Seen: time.Now()})
			}
			require.NoError(b, r.store.Refresh(ctx, batch))
			returned := time.Now()
			for _, s := range batch {
				signalled[s.Device] = returned
			}
		}
		got := waitFor(b, r.sink, event.Recovered, n, time.Minute)
		b.StopTimer()
		stop()
		for _, p := range got {
			if p.Kind != event.Recovered {
				continue
			}
			at, ok := signalled[p.DeviceID]
			require.True(b, ok, fmt.Sprintf("recovered event for %s, which did not signal", p.DeviceID))
			latency = append(latency, p.AckedAt.Sub(at))
		}
	}
	slices.Sort(latency)
	b.ReportMetric(ms(quantile(latency, 0.5)), "p50-ms")
	b.ReportMetric(ms(quantile(latency, 0.99)), "p99-ms")
	b.ReportMetric(ms(quantile(latency, 1)), "max-ms")
}
