package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// TestScenariosTiny runs every scenario at a tiny size so the bench command keeps working: each must
// produce its figures, detection must never be early and no event may be missing. No figure is
// compared with a goal here (a shared machine is too noisy); docs/benchmarks.md holds the measurements.
func TestScenariosTiny(t *testing.T) {
	for _, bin := range []string{"redis-server", "redis-benchmark", "mosquitto"} {
		if _, err := testenv.LookPath(bin); err != nil {
			testenv.Need(t, bin, err)
		}
	}
	opts := options{Devices: 2000, Window: time.Second, Duration: 300 * time.Millisecond, Signals: 2000,
		ExpiryDevices: 2000, RecoverDevices: 200, StormFleet: 3000, StormGateways: 10, StormPerGateway: 100, StormRounds: 2, RefreshRate: 20_000, CPUPartitions: 4, CPURate: 200_000, HeartbeatdBin: testenv.HeartbeatdBinary(t),
		QuietTimeout: 2 * time.Second, ScaleSizes: []int{2000, 4000}, ScaleIdle: 500 * time.Millisecond, ScaleWindow: time.Second, Progress: io.Discard}
	if testing.Verbose() {
		opts.Progress = testWriter{t}
	}
	// The quiet scenario waits for a minute of the wall clock to end: up to a minute more; the scale
	// scenario a Kafka session timeout (10 s) and more per size, for the replica it kills.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := run(ctx, opts)
	require.NoError(t, err)

	got := map[string]map[string]float64{}
	for _, r := range rep.Results {
		if got[r.Scenario] == nil {
			got[r.Scenario] = map[string]float64{}
		}
		got[r.Scenario][r.Metric] = r.Value
	}
	positive := map[string][]string{
		"refresh":   {"redis-benchmark -P 64 ZADD GT", "deadline.Refresh typed, periodic", "deadline.Refresh typed, random", "deadline.Refresh untyped, periodic", "deadline.Refresh untyped, random"},
		"memory":    {"redis bytes per device"},
		"ingest":    {"deadline.Refresh 256/call", "kafka → redis (from start)", "kafka → redis (from 1st write)", "mqtt plain QoS 1 subscriber", "mqtt → redis"},
		"http":      {"deadline.Refresh 256/call", "kafka → redis (from 1st write)", "http → redis"},
		"lateness":  {"heartbeatd lateness max", "heartbeatd acked max", "heartbeatd events/s", "concurrent refresh load", "keyspace SET PX lateness max"},
		"expiry":    {"all events acked after", "events/s"},
		"storm":     {"plain: deadline → last interrupted", "plain: interrupted events", "storm: deadline → last suppressed", "storm: gateways → last suppressed", "storm: gateways → gateways acked", "storm: interrupted events", "storm: suppressed events", "storm: gateways → last suppressed ÷ plain, median"},
		"recovered": {"latency p50", "latency p99", "latency max"},
		"notify":    {"off: lateness p99", "on: lateness p99", "on ÷ off lateness p99, median", "on ÷ off events/s, median", "on: events the notifier handled", "on: webhook messages"},
		"blind":     {"heartbeatd lateness p50", "heartbeatd lateness max"},
		"outage":    {"group_wait 0s: pages", "group_wait 0s: outage_started", "group_wait 5s: pages", "group_wait 5s: lone device lateness"},
		"quiet":     {"plain before: lateness max", "quiet end: lateness max", "plain after: lateness max", "quiet end: last acked", "quiet end p99 / plain p99"},
		"scale": {"2k import rate", "2k Redis memory per device", "4k import rate", "4k Redis memory per device", "4k burst lateness p99",
			"4k burst lateness max", "4k burst lateness, worst twentieth", "4k Redis memory per signalling device", "4k replica 1 VmHWM", "4k replica 2 VmHWM",
			"4k slot takeover after SIGKILL", "4k dead share read again", "import time ratio", "memory ratio", "lateness p99 ratio",
			"slot takeover ratio", "dead share read again ratio", "replica VmHWM ratio"},
		"rss":  {"heartbeatd VmRSS idle", "heartbeatd VmRSS with devices", "heartbeatd VmHWM", "ingest rate into the binary"},
		"idle": {"heartbeatd Redis CPU while idle"},
		"cost": {"SET PX pipelined, random: commandstats", "Refresh typed, random: commandstats", "Refresh untyped, random: commandstats", "ZADD GT into 65,536 small sets (not heartbeatd's layout), random: commandstats",
			"Refresh typed, jittered 5%: commandstats", "SET PX pipelined, jittered 5%: commandstats", "ZADD GT into a set per device (not heartbeatd's layout), random: commandstats"},
	}
	for _, s := range names() {
		if s == "daemon-cpu" {
			continue // checked below
		}
		require.Contains(t, positive, s, "scenario %s has no expected figures in this test", s)
	}
	for s, metrics := range positive {
		for _, m := range metrics {
			require.Contains(t, got[s], m, "%s: %s not reported", s, m)
			require.Greater(t, got[s][m], 0.0, "%s: %s", s, m)
		}
	}
	require.Contains(t, got["lateness"], "heartbeatd lateness p99")
	require.Contains(t, got["rss"], "RSS growth per device")
	// 2000 signals cost the binary less than the kernel's 10 ms CPU tick: reported, maybe as 0.
	for _, m := range []string{"heartbeatd CPU per million signals", "heartbeatd CPU per million signals, untyped random",
		"heartbeatd CPU per million signals, typed periodic", "heartbeatd CPU per million signals, typed random",
		"heartbeatd CPU per million signals, untyped periodic, kept up"} {
		require.Contains(t, got["daemon-cpu"], m)
	}
	for _, c := range []string{"untyped periodic", "untyped random", "typed periodic", "typed random", "untyped periodic, kept up"} {
		require.Greater(t, got["daemon-cpu"]["heartbeatd Redis time per signal, "+c], 0.0, "daemon-cpu: Redis time, %s", c)
		require.InDelta(t, 512.5, got["daemon-cpu"]["heartbeatd signals per deadline write, "+c], 511.5, "daemon-cpu: batch size, %s (1 to ingest.batch)", c)
	}
	// Timed by the record's timestamp, not by when it was processed (the clock may tick once between the
	// sample's reading and the record's).
	require.LessOrEqual(t, got["daemon-cpu"]["heartbeatd deadline shift p99"], 1.0, "a Kafka signal is timed by its record's timestamp")
	zero := map[string][]string{
		"lateness": {"heartbeatd early events", "heartbeatd missing events", "heartbeatd wrong-deadline events", "keyspace SET PX missing events"},
		"expiry":   {"early events"},
		"blind":    {"heartbeatd false interruptions"},
		"storm":    {"plain: other events", "storm: dark devices interrupted", "storm: other events", "early events"},
		"quiet":    {"plain before: early events", "quiet end: early events", "plain after: early events"},
		"scale":    {"2k burst early events", "4k burst early events"},
	}
	for s, metrics := range zero {
		for _, m := range metrics {
			require.Contains(t, got[s], m, "%s: %s not reported", s, m)
			require.Zero(t, got[s][m], "%s: %s", s, m)
		}
	}
}

func TestUnknownScenario(t *testing.T) {
	_, err := run(context.Background(), options{Scenarios: []string{"nope"}, Progress: io.Discard})
	require.ErrorContains(t, err, `unknown scenario "nope"`)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// TestTwentiethMeans: each event counts in the twentieth of the spread its deadline falls in, the last
// deadline in the last.
func TestTwentiethMeans(t *testing.T) {
	first := time.Unix(1000, 0)
	last := first.Add(10 * time.Second)
	deadlines := []time.Time{first, first.Add(100 * time.Millisecond), first.Add(5 * time.Second), last}
	late := []time.Duration{10 * time.Millisecond, 30 * time.Millisecond, 400 * time.Millisecond, 70 * time.Millisecond}
	means := twentiethMeans(late, deadlines, first, last)
	require.Len(t, means, 20)
	require.Equal(t, 20*time.Millisecond, means[0])
	require.Equal(t, 400*time.Millisecond, means[10])
	require.Equal(t, 70*time.Millisecond, means[19])
	require.Zero(t, means[5], "no deadline there")
}

// TestMedianOf: the middle value of an odd count, the mean of the middle two of an even one, in any order.
func TestMedianOf(t *testing.T) {
	require.Equal(t, 1.2, medianOf([]float64{1.3, 1.2, 1.1}))
	require.InDelta(t, 1.15, medianOf([]float64{1.3, 1.1, 1.2, 1.0}), 1e-9)
	require.Zero(t, medianOf(nil))
}
