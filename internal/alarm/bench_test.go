package alarm_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// The benchmarks below run heartbeatd's detection path as the daemon wires it (internal/benchrig, which
// cmd/hbbench runs too) on a real redis-server and an in-process kfake broker, by the wall clock. Their
// figures are reported with b.ReportMetric and never asserted: a shared 2-core machine is too noisy for
// timed assertions.
//
// Sizes come from the environment so `make test` (-benchtime=1x) finishes in seconds with the defaults
// and a measurement can ask for more:
//
//	HB_BENCH_DEVICES=1000000 go test -run '^$' -bench DetectionLateness -benchtime=1x ./internal/alarm/
//
// HB_BENCH_DEVICES (lateness fleet, default 100k), HB_BENCH_WINDOW (lateness spread, default 10s),
// HB_BENCH_REFRESH_RATE (signals/s of the concurrent refresh load, default 50k; 0 = as fast as it goes),
// HB_BENCH_EXPIRY_DEVICES (simultaneous expiry, default 100k), HB_BENCH_RECOVER_DEVICES (default 10k),
// HB_BENCH_STORM_FLEET, HB_BENCH_STORM_GATEWAYS, HB_BENCH_STORM_PER_GATEWAY (gateway storm: default 200k
// devices of which 1000 gateways and 100 devices behind each go dark).

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

// newRig starts a redis-server and the rig on it; expected is how many events one iteration records.
func newRig(b *testing.B, expected int) *benchrig.Rig {
	b.Helper()
	r, err := benchrig.New(testenv.StartRedis(b).Client(b), expected)
	require.NoError(b, err)
	b.Cleanup(r.Close)
	return r
}

// iterations runs iteration b.N times, each with b's timer stopped: the rig's runs time what they measure.
func iterations(b *testing.B, iteration func()) {
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		iteration()
	}
}

// BenchmarkDetectionLateness: HB_BENCH_DEVICES devices whose deadlines are spread evenly over
// HB_BENCH_WINDOW while a refresh load moves other devices' deadlines. Lateness is the event's time
// minus the deadline it reports (what detection_lateness_seconds observes); "acked" adds the publish to
// Kafka. Goal: p99 ≤ 50 ms, max ≤ 250 ms, never early.
func BenchmarkDetectionLateness(b *testing.B) {
	o := benchrig.LatenessOptions{Devices: envInt("HB_BENCH_DEVICES", 100_000), Window: envDuration("HB_BENCH_WINDOW", 10*time.Second),
		RefreshRate: envInt("HB_BENCH_REFRESH_RATE", 50_000), LoadTypes: []string{"default"}}
	r := newRig(b, o.Devices)
	var lateness, acked []time.Duration
	var early, events int
	var spent, loadTime time.Duration
	var signals int64
	iterations(b, func() {
		res, err := r.Lateness(context.Background(), o, b)
		require.NoError(b, err)
		require.Zero(b, res.Busy, "events for load devices, which must keep signalling")
		lateness, acked = append(lateness, res.Lateness...), append(acked, res.Acked...)
		early += res.Early
		events += o.Devices
		spent += res.Last.Sub(res.First)
		signals += res.Signals
		loadTime += res.LoadTime
	})
	reportMs(b, lateness, "", 0.5, 0.99, 1)
	reportMs(b, acked, "acked-", 0.99, 1)
	b.ReportMetric(float64(early), "early")
	b.ReportMetric(float64(events)/spent.Seconds(), "events/s")
	b.ReportMetric(float64(signals)/loadTime.Seconds(), "refresh-signals/s")
}

// BenchmarkSimultaneousExpiry: HB_BENCH_EXPIRY_DEVICES devices with one and the same deadline; the time
// from that deadline until Kafka acknowledged every interrupted event. Goal at 100k: ≤ 2 s.
func BenchmarkSimultaneousExpiry(b *testing.B) {
	n := envInt("HB_BENCH_EXPIRY_DEVICES", 100_000)
	r := newRig(b, n)
	var total time.Duration
	iterations(b, func() {
		res, err := r.Expiry(context.Background(), n, b)
		require.NoError(b, err)
		require.Zero(b, res.Early, "early events")
		total += res.Last.Sub(res.Deadline)
	})
	b.ReportMetric(total.Seconds()/float64(b.N), "s-to-all-acked")
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "events/s")
}

// BenchmarkRecoveredLatency: HB_BENCH_RECOVER_DEVICES interrupted devices signal again (untyped, as a
// device's message usually is), spread over two seconds in batches of 100; the time from each Refresh's
// return to Kafka acknowledging that device's recovered event. Goal: p99 ≤ 1 s.
func BenchmarkRecoveredLatency(b *testing.B) {
	n := envInt("HB_BENCH_RECOVER_DEVICES", 10_000)
	r := newRig(b, 2*n) // interrupted, then recovered
	var latency []time.Duration
	iterations(b, func() {
		l, err := r.Recovered(context.Background(), n, b)
		require.NoError(b, err)
		latency = append(latency, l...)
	})
	reportMs(b, latency, "", 0.5, 0.99, 1)
}

// BenchmarkGatewayStorm: HB_BENCH_STORM_GATEWAYS gateways and the HB_BENCH_STORM_PER_GATEWAY devices
// behind each (on a shorter timeout) go dark at once in a fleet of HB_BENCH_STORM_FLEET, against the
// same devices going dark without parents in the same iteration (plain-s-to-all-acked). Reported: the
// time from the gateways' deadline until Kafka acknowledged the last `suppressed`, and from the dark
// devices' own deadline, which includes the time their gateways outlive them.
func BenchmarkGatewayStorm(b *testing.B) {
	o := benchrig.StormOptions{Fleet: envInt("HB_BENCH_STORM_FLEET", 200_000), Gateways: envInt("HB_BENCH_STORM_GATEWAYS", 1000),
		PerGateway: envInt("HB_BENCH_STORM_PER_GATEWAY", 100)}
	r, err := benchrig.NewStorm(testenv.StartRedis(b).Client(b), o.Dark()+o.Gateways)
	require.NoError(b, err)
	b.Cleanup(r.Close)
	var plain, fromGateways, fromDeadline time.Duration
	iterations(b, func() {
		plainOpts := o
		plainOpts.Plain = true
		p, err := r.Storm(context.Background(), plainOpts, nil)
		require.NoError(b, err)
		plain += p.Last.Sub(p.Deadline)
		s, err := r.Storm(context.Background(), o, b)
		require.NoError(b, err)
		require.Zero(b, s.DarkInterrupted, "devices behind a gateway interrupted on their own")
		require.Zero(b, s.Early+p.Early, "early events")
		require.Equal(b, o.Gateways, s.Events[event.Interrupted], "gateway interruptions")
		fromGateways += s.Last.Sub(s.GatewayDeadline)
		fromDeadline += s.Last.Sub(s.Deadline)
	})
	b.ReportMetric(fromGateways.Seconds()/float64(b.N), "s-gateways-to-all-suppressed")
	b.ReportMetric(fromDeadline.Seconds()/float64(b.N), "s-deadline-to-all-suppressed")
	b.ReportMetric(plain.Seconds()/float64(b.N), "plain-s-to-all-acked")
	b.ReportMetric(fromGateways.Seconds()/plain.Seconds(), "x-plain")
}

// reportMs reports quantiles of d in ms, as prefix+"p50-ms", "p99-ms" and "max-ms" (q = 1).
func reportMs(b *testing.B, d []time.Duration, prefix string, qs ...float64) {
	slices.Sort(d)
	for _, q := range qs {
		name := "max"
		if q < 1 {
			name = fmt.Sprintf("p%.0f", q*100)
		}
		b.ReportMetric(benchrig.Ms(benchrig.Quantile(d, q)), prefix+name+"-ms")
	}
}
