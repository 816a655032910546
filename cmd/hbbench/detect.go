package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// The detection scenarios (lateness, expiry, storm, recovered) run internal/benchrig on hbbench's redis-server,
// with a kfake broker of their own: the rig of internal/alarm's Go benchmarks (BenchmarkDetectionLateness,
// BenchmarkSimultaneousExpiry, BenchmarkRecoveredLatency).

// withRig runs f on a fresh rig whose recorder has room for expected events.
func withRig(e *env, expected int, f func(r *benchrig.Rig) error) error {
	r, err := benchrig.New(e.redis.client, expected)
	if err != nil {
		return err
	}
	defer r.Close()
	return f(r)
}

// latenessScenario: -devices devices whose deadlines are spread evenly over -window while a refresh load
// (-refresh-rate signals/s) moves other devices' deadlines; then the keyspace baseline on the same server
// with the same devices and window. Lateness is the event's time minus the deadline it reports (what
// detection_lateness_seconds observes); "acked" adds the publish to Kafka. Goal: p99 ≤ 50 ms, max ≤
// 250 ms, never early.
func latenessScenario(e *env) error {
	n, window := e.opts.Devices, e.opts.Window
	var res *benchrig.LatenessResult
	err := withRig(e, n, func(r *benchrig.Rig) (err error) {
		res, err = r.Lateness(e.ctx, benchrig.LatenessOptions{Devices: n, Window: window, RefreshRate: e.opts.RefreshRate, LoadTypes: benchTypes}, nil)
		return err
	})
	if res == nil {
		return err
	}
	// Reported also when detection fell behind, so the table shows how far behind.
	note := fmt.Sprintf("%d devices over %s", n, window)
	e.add("lateness", "heartbeatd lateness p50", benchrig.Ms(benchrig.Quantile(res.Lateness, 0.5)), "ms", note)
	e.add("lateness", "heartbeatd lateness p99", benchrig.Ms(benchrig.Quantile(res.Lateness, 0.99)), "ms", "goal ≤ 50")
	e.add("lateness", "heartbeatd lateness max", benchrig.Ms(benchrig.Quantile(res.Lateness, 1)), "ms", "goal ≤ 250")
	e.add("lateness", "heartbeatd acked p99", benchrig.Ms(benchrig.Quantile(res.Acked, 0.99)), "ms", "event acknowledged by Kafka")
	e.add("lateness", "heartbeatd acked max", benchrig.Ms(benchrig.Quantile(res.Acked, 1)), "ms", "")
	e.add("lateness", "heartbeatd early events", float64(res.Early), "count", "must be 0")
	e.add("lateness", "heartbeatd events/s", float64(len(res.Lateness))/res.Last.Sub(res.First).Seconds(), "events/s", fmt.Sprintf("%.0f/s needed", float64(n)/window.Seconds()))
	e.add("lateness", "heartbeatd missing events", float64(n-len(res.Lateness)), "count", fmt.Sprintf("not acked within window+1m, of %d", n))
	e.add("lateness", "concurrent refresh load", float64(res.Signals)/res.LoadTime.Seconds(), "signals/s", fmt.Sprintf("other devices, target %d/s", e.opts.RefreshRate))
	e.add("lateness", "heartbeatd wrong-deadline events", float64(res.Wrong), "count", "must be 0; "+res.FirstWrong)
	// Not an error: these are true events for load devices the (possibly starved) load left silent for
	// a whole timeout; they cost the scanner work, so they are shown.
	e.add("lateness", "busy-fleet events", float64(res.Busy), "count", "load devices left silent past their timeout")
	if err != nil {
		return err
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
	var res benchrig.ExpiryResult
	if err := withRig(e, n, func(r *benchrig.Rig) (err error) { res, err = r.Expiry(e.ctx, n, nil); return err }); err != nil {
		return err
	}
	total := res.Last.Sub(res.Deadline)
	e.add("expiry", "all events acked after", total.Seconds(), "s", fmt.Sprintf("%d simultaneous deadlines; goal ≤ 2 at 100k", n))
	e.add("expiry", "events/s", float64(n)/total.Seconds(), "events/s", "")
	e.add("expiry", "early events", float64(res.Early), "count", "must be 0")
	return nil
}

// recoveredScenario: -recover-devices interrupted devices signal again (untyped, as a device's message
// usually is), spread over two seconds in batches of 100; the time from each Refresh's return to Kafka
// acknowledging that device's recovered event. Goal: p99 ≤ 1 s.
func recoveredScenario(e *env) error {
	n := e.opts.RecoverDevices
	var latency []time.Duration
	err := withRig(e, 2*n, func(r *benchrig.Rig) (err error) { latency, err = r.Recovered(e.ctx, n, nil); return err })
	if err != nil {
		return err
	}
	note := fmt.Sprintf("%d devices, signal → recovered acked by Kafka", n)
	e.add("recovered", "latency p50", benchrig.Ms(benchrig.Quantile(latency, 0.5)), "ms", note)
	e.add("recovered", "latency p99", benchrig.Ms(benchrig.Quantile(latency, 0.99)), "ms", "goal ≤ 1000")
	e.add("recovered", "latency max", benchrig.Ms(benchrig.Quantile(latency, 1)), "ms", "")
	return nil
}

// stormScenario: a fleet of -storm-fleet devices in which -storm-gateways gateways and the
// -storm-per-gateway devices behind each (on a shorter timeout: they expire first) go dark at one
// instant, against the same devices going dark without parents (the expiry scenario's case on the same
// fleet), run before and after each of -storm-rounds storms; each storm is compared with the mean of the
// plain runs around it. Measured: the events by kind, and the time from the first deadline to Kafka
// acknowledging the last verdict (`suppressed` in the storm, `interrupted` in the baseline); for the
// storm also from the gateways' deadline. The rows describe the first storm; with more rounds, the
// median ratio of them all follows.
func stormScenario(e *env) error {
	o := benchrig.StormOptions{Fleet: e.opts.StormFleet, Gateways: e.opts.StormGateways, PerGateway: e.opts.StormPerGateway}
	r, err := benchrig.NewStorm(e.redis.client, o.Dark()+o.Gateways)
	if err != nil {
		return err
	}
	defer r.Close()
	run := func(plain bool) (benchrig.StormResult, error) {
		ro := o
		ro.Plain = plain
		return r.Storm(e.ctx, ro, nil)
	}
	plains := make([]benchrig.StormResult, 0, e.opts.StormRounds+1)
	storms := make([]benchrig.StormResult, 0, e.opts.StormRounds)
	first, err := run(true)
	if err != nil {
		return err
	}
	plains = append(plains, first)
	for range e.opts.StormRounds {
		storm, err := run(false)
		if err != nil {
			return err
		}
		after, err := run(true)
		if err != nil {
			return err
		}
		storms, plains = append(storms, storm), append(plains, after)
	}
	took := func(res benchrig.StormResult) time.Duration { return res.Last.Sub(res.Deadline) }
	plainAround := func(i int) time.Duration { return (took(plains[i]) + took(plains[i+1])) / 2 }
	ratios := make([]float64, len(storms))
	for i, st := range storms {
		ratios[i] = st.Last.Sub(st.GatewayDeadline).Seconds() / plainAround(i).Seconds()
	}
	storm, before, after, plain := storms[0], plains[0], plains[1], plainAround(0)
	dark := o.Dark()
	size := fmt.Sprintf("%d devices behind %d gateways dark at once in a fleet of %d", dark, o.Gateways, o.Fleet)
	e.add("storm", "plain: deadline → last interrupted", plain.Seconds(), "s",
		fmt.Sprintf("baseline, same run: %d devices without parents in the same fleet; mean of %.2f before and %.2f after the storm",
			dark, took(before).Seconds(), took(after).Seconds()))
	e.add("storm", "plain: interrupted events", float64(before.Events[event.Interrupted]), "count", fmt.Sprintf("after the storm: %d", after.Events[event.Interrupted]))
	plainOthers, early := 0, 0
	for _, p := range plains {
		plainOthers += others(p.Events, event.Interrupted)
		early += p.Early
	}
	e.add("storm", "plain: other events", float64(plainOthers), "count", "must be 0")
	sinceFirst := storm.Last.Sub(storm.Deadline)
	fromGateways := storm.Last.Sub(storm.GatewayDeadline)
	e.add("storm", "storm: deadline → last suppressed", sinceFirst.Seconds(), "s",
		fmt.Sprintf("%s; %.2fx plain; includes the %s the gateways outlive them", size, sinceFirst.Seconds()/plain.Seconds(), storm.GatewayDeadline.Sub(storm.Deadline)))
	e.add("storm", "storm: gateways → last suppressed", fromGateways.Seconds(), "s",
		fmt.Sprintf("from the gateways' deadline; %.2fx plain", ratios[0]))
	e.add("storm", "storm: gateways → gateways acked", storm.GatewaysAcked.Sub(storm.GatewayDeadline).Seconds(), "s",
		"gateways' deadline → their last interrupted acked")
	e.add("storm", "storm: wake → last suppressed", storm.Last.Sub(storm.GatewaysAcked).Seconds(), "s",
		"last gateway acked → last suppressed acked: waking the devices behind them, their verdict")
	e.add("storm", "storm: interrupted events", float64(storm.Events[event.Interrupted]), "count", fmt.Sprintf("%d gateways", o.Gateways))
	e.add("storm", "storm: suppressed events", float64(storm.Events[event.Suppressed]), "count", fmt.Sprintf("of %d", dark))
	darkInterrupted, stormOthers := 0, 0
	for _, st := range storms {
		darkInterrupted += st.DarkInterrupted
		stormOthers += others(st.Events, event.Interrupted, event.Suppressed)
		early += st.Early
	}
	e.add("storm", "storm: dark devices interrupted", float64(darkInterrupted), "count", "must be 0")
	e.add("storm", "storm: other events", float64(stormOthers), "count", "must be 0")
	e.add("storm", "early events", float64(early), "count", "must be 0")
	if len(storms) > 1 {
		e.add("storm", "storm: gateways → last suppressed ÷ plain, median", medianOf(ratios), "x",
			fmt.Sprintf("%d storms, each against the plain runs around it: %s", len(storms), joinFloats(ratios)))
	}
	return nil
}

// others counts the events of kinds other than those named.
func others(byKind map[event.Kind]int, named ...event.Kind) int {
	n := 0
	for k, c := range byKind {
		if !slices.Contains(named, k) {
			n += c
		}
	}
	return n
}
