package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/eventrec"
	"github.com/heartbeatd/heartbeatd/pkg/alarm"
	"github.com/heartbeatd/heartbeatd/pkg/config"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
	"github.com/heartbeatd/heartbeatd/pkg/event/kafka"
)

// The detection scenarios (lateness, expiry, recovered) run heartbeatd's detection path as the daemon
// wires it — a scanner over every slot handing claims to the alarm handler, which publishes to Kafka and
// then acknowledges in Redis — on hbbench's redis-server and an in-process kfake broker, by the wall
// clock. This is the approach of pkg/alarm/bench_test.go (BenchmarkDetectionLateness,
// BenchmarkSimultaneousExpiry, BenchmarkRecoveredLatency), which stay as they are for `go test -bench`.

const eventsTopic = "heartbeat.events"

// detectPolicyYAML: one type whose timeout outlasts every scenario, so only the devices a scenario
// schedules come due, and no repeats, so every device yields exactly one interrupted event.
const detectPolicyYAML = `
types:
  default: {timeout: 30s, repeat_every: 0s}
`

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// detectRig is the store, publisher and policies of one detection scenario on a fresh kfake broker.
type detectRig struct {
	store    *deadline.Store
	sink     *eventrec.Recorder
	policies *config.Policies
	pub      *kafka.Publisher
	kafka    *kafkaBroker
}

// newDetectRig starts a rig whose recorder has room for expected events.
func newDetectRig(e *env, expected int) (*detectRig, error) {
	cfg, err := config.Parse([]byte(detectPolicyYAML), func(string) (string, bool) { return "", false })
	if err != nil {
		return nil, err
	}
	r := &detectRig{policies: cfg.Policies()}
	timeout := func(typ string) time.Duration { p, _ := r.policies.Lookup(typ); return p.Timeout }
	repeat := func(typ string) time.Duration { p, _ := r.policies.Lookup(typ); return p.RepeatEvery }
	if r.store, err = deadline.New(e.redis.client, deadline.Options{Slots: config.DefaultSlots, Timeout: timeout, RepeatEvery: repeat}); err != nil {
		return nil, err
	}
	if err := r.store.Load(e.ctx, r.policies.Names()...); err != nil {
		return nil, err
	}
	if r.kafka, err = startKafka(12, eventsTopic); err != nil {
		return nil, err
	}
	if r.pub, err = kafka.NewPublisher(kafka.PublisherOptions{Brokers: r.kafka.addrs, Topic: eventsTopic}); err != nil {
		r.kafka.stop()
		return nil, err
	}
	r.sink = eventrec.New(r.pub, expected)
	return r, nil
}

func (r *detectRig) close() {
	_ = r.pub.Close()
	r.kafka.stop()
}

// timeout is the silence timeout of the rig's one type.
func (r *detectRig) timeout() time.Duration { return r.policies.Default().Timeout }

// startScanner runs a scanner over every slot with the daemon's detection defaults, handing claims to an
// alarm handler; the returned function stops it and waits.
func (r *detectRig) startScanner() (stop func() error) {
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
	return func() error {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}
}

// schedule writes devices prefix0..n-1 so that device i's deadline is deadlineOf(i), in batches of 4096
// typed signals.
func (r *detectRig) schedule(ctx context.Context, prefix string, n int, deadlineOf func(i int) time.Time) error {
	batch := make([]deadline.Signal, 0, 4096)
	for i := range n {
		batch = append(batch, deadline.Signal{Device: prefix + strconv.Itoa(i), Type: "default", Seen: deadlineOf(i).Add(-r.timeout())})
		if len(batch) == cap(batch) || i == n-1 {
			if err := r.store.Refresh(ctx, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	return nil
}

// firstDeadline leaves time to schedule n devices before the first of them is due. Scheduling runs at
// ≈300k signals/s on a quiet machine, but 1M devices outlasted a 150k/s margin on the shared one, so the
// margin assumes 60k/s.
func firstDeadline(n int) time.Time {
	return time.Now().Add(time.Second + time.Duration(n)*time.Second/60_000).Truncate(time.Millisecond)
}

// load describes a refresh load: batches of 256 signals for random devices prefix0..fleet-1.
type load struct {
	prefix  string
	fleet   int
	workers int
	typed   bool
	perSec  int // 0: as fast as Redis takes them
	// periodic: devices signal in index order, over and over, as a fleet on a fixed period and phase
	// does (preload writes them in that order); otherwise each signal is from a device drawn at random.
	periodic bool
}

// refreshLoad sends the load until ctx ends and counts the signals Redis acknowledged in sent.
func refreshLoad(ctx context.Context, st *deadline.Store, l load, sent *atomic.Int64) error {
	const size = 256
	var wg sync.WaitGroup
	errs := make(chan error, l.workers)
	var next atomic.Int64 // the periodic order's position
	start := time.Now()
	for w := range l.workers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			batch := make([]deadline.Signal, size)
			for k := 0; ctx.Err() == nil; k++ {
				if l.perSec > 0 {
					// Batch k of this worker is due at k·size·workers/rate.
					due := start.Add(time.Duration(k) * time.Duration(size*l.workers) * time.Second / time.Duration(l.perSec))
					if sleepCtx(ctx, time.Until(due)) != nil {
						return
					}
				}
				now := time.Now()
				var pos int
				if l.periodic {
					pos = int(next.Add(size)) - size
				}
				for j := range batch {
					var d int
					if l.periodic {
						d = (pos + j) % l.fleet
					} else {
						d = rnd.IntN(l.fleet)
					}
					batch[j] = deadline.Signal{Device: l.prefix + strconv.Itoa(d), Seen: now}
					if l.typed {
						batch[j].Type = benchTypes[d%len(benchTypes)]
					}
				}
				if err := st.Refresh(ctx, batch); err != nil {
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

// busyFleet sizes the lateness scenario's load fleet so each of its devices is refreshed about every 2 s
// (P(silent for the 30 s timeout) ≈ e^-15): a 1M fleet at 50k signals/s left a fifth of it silent past
// its timeout, and those events were counted as the measured devices'.
func busyFleet(n, perSec int) int {
	if perSec <= 0 {
		return max(n, 10_000)
	}
	return max(10_000, min(n, 2*perSec))
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

// latenessScenario: -devices devices whose deadlines are spread evenly over -window while a refresh load
// (-refresh-rate signals/s) moves other devices' deadlines; then the keyspace baseline on the same server
// with the same devices and window. Lateness is the event's time minus the deadline it reports (what
// detection_lateness_seconds observes); "acked" adds the publish to Kafka. Goal: p99 ≤ 50 ms, max ≤
// 250 ms, never early.
func latenessScenario(e *env) error {
	n, window := e.opts.Devices, e.opts.Window
	r, err := newDetectRig(e, n)
	if err != nil {
		return err
	}
	defer r.close()
	t0 := firstDeadline(n)
	deadlineOf := func(i int) time.Time {
		return t0.Add(time.Duration(i) * window / time.Duration(n)).Truncate(time.Millisecond)
	}
	if err := r.schedule(e.ctx, "device-", n, deadlineOf); err != nil {
		return err
	}
	if !time.Now().Before(t0) {
		return fmt.Errorf("hbbench: scheduling %d devices outlasted the margin before the first deadline", n)
	}
	stop := r.startScanner()
	ctx, cancel := context.WithCancel(e.ctx)
	var signals atomic.Int64
	loadDone := make(chan error, 1)
	loadStart := time.Now()
	go func() {
		loadDone <- refreshLoad(ctx, r.store, load{prefix: "busy-", fleet: busyFleet(n, e.opts.RefreshRate), workers: 2, typed: true, perSec: e.opts.RefreshRate}, &signals)
	}()
	got, waitErr := r.sink.Wait(e.ctx, event.Interrupted, "device-", n, time.Until(t0)+window+time.Minute)
	cancel()
	loadErr := <-loadDone
	loadTime := time.Since(loadStart)
	if err := errors.Join(loadErr, stop()); err != nil {
		return errors.Join(waitErr, err)
	}
	if waitErr != nil {
		// Detection fell behind: report what did arrive, so the table shows how far behind, and fail.
		if e.ctx.Err() != nil {
			return waitErr
		}
		got = r.sink.Snapshot()
	}
	var lateness, acked []time.Duration
	early, wrong, busy, firstWrong := 0, 0, 0, ""
	var last time.Time
	for _, p := range got {
		if p.Kind != event.Interrupted {
			continue
		}
		id, ok := strings.CutPrefix(p.DeviceID, "device-")
		if !ok {
			busy++
			continue
		}
		i, err := strconv.Atoi(id)
		if err != nil {
			return fmt.Errorf("hbbench: event for %q: %w", p.DeviceID, err)
		}
		if !p.Deadline.Equal(deadlineOf(i)) {
			// Counted rather than fatal, so one run shows how often it happens next to the other figures.
			if wrong == 0 {
				firstWrong = fmt.Sprintf("device %d: deadline %s, scheduled %s", i, p.Deadline.Format(time.StampMilli), deadlineOf(i).Format(time.StampMilli))
			}
			wrong++
			continue
		}
		l := p.At.Sub(p.Deadline)
		if l < 0 || p.AckedAt.Before(p.Deadline) {
			early++
		}
		lateness = append(lateness, l)
		acked = append(acked, p.AckedAt.Sub(p.Deadline))
		last = maxTime(last, p.AckedAt)
	}
	slices.Sort(lateness)
	slices.Sort(acked)
	note := fmt.Sprintf("%d devices over %s", n, window)
	e.add("lateness", "heartbeatd lateness p50", ms(quantile(lateness, 0.5)), "ms", note)
	e.add("lateness", "heartbeatd lateness p99", ms(quantile(lateness, 0.99)), "ms", "goal ≤ 50")
	e.add("lateness", "heartbeatd lateness max", ms(quantile(lateness, 1)), "ms", "goal ≤ 250")
	e.add("lateness", "heartbeatd acked p99", ms(quantile(acked, 0.99)), "ms", "event acknowledged by Kafka")
	e.add("lateness", "heartbeatd acked max", ms(quantile(acked, 1)), "ms", "")
	e.add("lateness", "heartbeatd early events", float64(early), "count", "must be 0")
	e.add("lateness", "heartbeatd events/s", float64(len(lateness))/last.Sub(t0).Seconds(), "events/s", fmt.Sprintf("%.0f/s needed", float64(n)/window.Seconds()))
	e.add("lateness", "heartbeatd missing events", float64(n-len(lateness)), "count", fmt.Sprintf("not acked within window+1m, of %d", n))
	e.add("lateness", "concurrent refresh load", float64(signals.Load())/loadTime.Seconds(), "signals/s", fmt.Sprintf("other devices, target %d/s", e.opts.RefreshRate))
	e.add("lateness", "heartbeatd wrong-deadline events", float64(wrong), "count", "must be 0; "+firstWrong)
	// Not an error: these are true events for load devices the (possibly starved) load left silent for
	// a whole timeout; they cost the scanner work, so they are shown.
	e.add("lateness", "busy-fleet events", float64(busy), "count", "load devices left silent past their timeout")
	if wrong > 0 {
		waitErr = errors.Join(waitErr, fmt.Errorf("hbbench: %d events reported another deadline than scheduled, first: %s", wrong, firstWrong))
	}
	if waitErr != nil {
		return waitErr
	}
	if err := e.redis.flush(e.ctx); err != nil {
		return err
	}
	return keyspaceBaseline(e, "lateness", "keyspace SET PX ")
}

// expiryScenario: -expiry-devices devices with one and the same deadline; the time from that deadline
// until Kafka acknowledged every interrupted event. Goal at 100k: ≤ 2 s.
func expiryScenario(e *env) error {
	n := e.opts.ExpiryDevices
	r, err := newDetectRig(e, n)
	if err != nil {
		return err
	}
	defer r.close()
	d := firstDeadline(n)
	if err := r.schedule(e.ctx, "device-", n, func(int) time.Time { return d }); err != nil {
		return err
	}
	if !time.Now().Before(d) {
		return fmt.Errorf("hbbench: scheduling %d devices outlasted the margin before the deadline", n)
	}
	stop := r.startScanner()
	got, waitErr := r.sink.Wait(e.ctx, event.Interrupted, "", n, time.Minute)
	if err := errors.Join(waitErr, stop()); err != nil {
		return err
	}
	var last time.Time
	early := 0
	for _, p := range got {
		if p.At.Before(d) {
			early++
		}
		last = maxTime(last, p.AckedAt)
	}
	total := last.Sub(d)
	e.add("expiry", "all events acked after", total.Seconds(), "s", fmt.Sprintf("%d simultaneous deadlines; goal ≤ 2 at 100k", n))
	e.add("expiry", "events/s", float64(n)/total.Seconds(), "events/s", "")
	e.add("expiry", "early events", float64(early), "count", "must be 0")
	return nil
}

// recoveredScenario: -recover-devices interrupted devices signal again (untyped, as a device's message
// usually is), spread over two seconds in batches of 100; the time from each Refresh's return to Kafka
// acknowledging that device's recovered event. Goal: p99 ≤ 1 s.
func recoveredScenario(e *env) error {
	n := e.opts.RecoverDevices
	const size = 100
	r, err := newDetectRig(e, 2*n) // interrupted, then recovered
	if err != nil {
		return err
	}
	defer r.close()
	d := firstDeadline(n)
	if err := r.schedule(e.ctx, "device-", n, func(int) time.Time { return d }); err != nil {
		return err
	}
	stop := r.startScanner()
	if _, err := r.sink.Wait(e.ctx, event.Interrupted, "", n, time.Minute); err != nil {
		return errors.Join(err, stop())
	}
	r.sink.Reset()
	signalled := make(map[string]time.Time, n)
	start := time.Now()
	batches := (n + size - 1) / size
	for k := range batches {
		if err := sleepCtx(e.ctx, time.Until(start.Add(time.Duration(k)*2*time.Second/time.Duration(batches)))); err != nil {
			return errors.Join(err, stop())
		}
		batch := make([]deadline.Signal, 0, size)
		for i := k * size; i < min(n, (k+1)*size); i++ {
			batch = append(batch, deadline.Signal{Device: "device-" + strconv.Itoa(i), Seen: time.Now()})
		}
		if err := r.store.Refresh(e.ctx, batch); err != nil {
			return errors.Join(err, stop())
		}
		returned := time.Now()
		for _, s := range batch {
			signalled[s.Device] = returned
		}
	}
	got, waitErr := r.sink.Wait(e.ctx, event.Recovered, "", n, time.Minute)
	if err := errors.Join(waitErr, stop()); err != nil {
		return err
	}
	var latency []time.Duration
	for _, p := range got {
		if p.Kind != event.Recovered {
			continue
		}
		at, ok := signalled[p.DeviceID]
		if !ok {
			return fmt.Errorf("hbbench: recovered event for %s, which did not signal", p.DeviceID)
		}
		latency = append(latency, p.AckedAt.Sub(at))
	}
	slices.Sort(latency)
	note := fmt.Sprintf("%d devices, signal → recovered acked by Kafka", n)
	e.add("recovered", "latency p50", ms(quantile(latency, 0.5)), "ms", note)
	e.add("recovered", "latency p99", ms(quantile(latency, 0.99)), "ms", "goal ≤ 1000")
	e.add("recovered", "latency max", ms(quantile(latency, 1)), "ms", "")
	return nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
