package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/notify"
)

func init() { register("notify", notifyScenario) }

// notifyRounds is how many pairs of lateness runs the notify scenario makes, one without the notifier
// and one with it in each, the order alternating between pairs so a drift of the machine weighs on both.
const notifyRounds = 3

// notifyBlock is the notifier of the notify scenario: every interruption to one webhook at the default
// rate limit (1/s, bursts of 10), so a mass expiry is folded into summaries, as it would be in production.
const notifyBlock = `
types: {default: {}}
notify:
  receivers:
    - {name: hook, webhook: {url: %q}}
  routes:
    - {receiver: hook}
`

// notifyScenario: the lateness run (-devices deadlines over -window under the refresh load) with and
// without the notifier reading the events topic beside detection, on the same Redis in the same process
// (notify.enabled), notifyRounds pairs. Reported: each side's median lateness p50 and p99 and events/s,
// and the medians of the pairs' ratios (with all of them): detection must not notice the notifier.
func notifyScenario(e *env) error {
	n, window := e.opts.Devices, e.opts.Window
	var hooks atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hooks.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	cfg, err := config.Parse(fmt.Appendf(nil, notifyBlock, srv.URL), func(string) (string, bool) { return "", false })
	if err != nil {
		return err
	}
	var off, on []*benchrig.LatenessResult
	var handled []float64
	err = withRig(e, n, func(r *benchrig.Rig) error {
		for round := range notifyRounds {
			for _, with := range []bool{round%2 == 1, round%2 == 0} {
				res, count, err := notifyRound(e, r, cfg.Notify, round, with)
				if err != nil {
					return err
				}
				if with {
					on, handled = append(on, res), append(handled, count)
				} else {
					off = append(off, res)
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	p := func(res *benchrig.LatenessResult, q float64) float64 {
		return benchrig.Ms(benchrig.Quantile(res.Lateness, q))
	}
	perSecond := func(res *benchrig.LatenessResult) float64 {
		return float64(len(res.Lateness)) / res.Last.Sub(res.First).Seconds()
	}
	side := func(rs []*benchrig.LatenessResult, f func(*benchrig.LatenessResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, res := range rs {
			v[i] = f(res)
		}
		return medianOf(v)
	}
	ratios := func(f func(*benchrig.LatenessResult) float64) []float64 {
		v := make([]float64, len(on))
		for i := range on {
			v[i] = f(on[i]) / f(off[i])
		}
		return v
	}
	p50 := func(res *benchrig.LatenessResult) float64 { return p(res, 0.5) }
	p99 := func(res *benchrig.LatenessResult) float64 { return p(res, 0.99) }
	note := fmt.Sprintf("%d devices over %s, median of %d runs", n, window, notifyRounds)
	e.add("notify", "off: lateness p50", side(off, p50), "ms", note)
	e.add("notify", "off: lateness p99", side(off, p99), "ms", "baseline, same run: no notifier")
	e.add("notify", "on: lateness p50", side(on, p50), "ms", note)
	e.add("notify", "on: lateness p99", side(on, p99), "ms", "the notifier reading the events topic beside detection")
	for _, m := range []struct {
		name string
		f    func(*benchrig.LatenessResult) float64
	}{{"lateness p50", p50}, {"lateness p99", p99}, {"events/s", perSecond}} {
		v := ratios(m.f)
		e.add("notify", "on ÷ off "+m.name+", median", medianOf(v), "x",
			fmt.Sprintf("%d pairs: %s (%.2f–%.2f)", len(v), joinFloats(v), slices.Min(v), slices.Max(v)))
	}
	e.add("notify", "on: events the notifier handled", slices.Min(handled), "count", fmt.Sprintf("of %d per run, the least of the runs", n))
	e.add("notify", "on: webhook messages", float64(hooks.Load())/float64(notifyRounds), "count", "per run: the burst, then a summary a second")
	return nil
}

// notifyRound is one lateness run, with a notifier of a group of its own (so it starts at the topic's
// end) when with is set; it returns how many of the run's events the notifier handled.
func notifyRound(e *env, r *benchrig.Rig, n config.Notify, round int, with bool) (*benchrig.LatenessResult, float64, error) {
	o := benchrig.LatenessOptions{Devices: e.opts.Devices, Window: e.opts.Window, RefreshRate: e.opts.RefreshRate, LoadTypes: benchTypes}
	if !with {
		settle(o.Devices)
		res, err := r.Lateness(e.ctx, o, nil)
		return res, 0, err
	}
	n.GroupID = fmt.Sprintf("hbbench-notify-%d-%d", time.Now().UnixNano(), round)
	reg := prometheus.NewRegistry()
	nt, err := notify.New(notify.Options{Notify: n, Brokers: r.KafkaAddrs(), Topic: benchrig.EventsTopic, Redis: e.redis.client, Registerer: reg})
	if err != nil {
		return nil, 0, err
	}
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = nt.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	// Measured from its place in the group on: the run's events are its to read.
	if err := awaitNotifierReady(ctx, nt); err != nil {
		return nil, 0, err
	}
	settle(o.Devices)
	res, err := r.Lateness(e.ctx, o, nil)
	if err != nil {
		return res, 0, err
	}
	// The notifier worked beside detection: wait (boundedly) until it handled the run's events.
	var handled float64
	deadline := time.Now().Add(time.Minute)
	for handled = notificationsHandled(reg); handled < float64(len(res.Lateness)) && time.Now().Before(deadline); handled = notificationsHandled(reg) {
		time.Sleep(100 * time.Millisecond)
	}
	return res, handled, nil
}

// settle is the pause before every run of the notify scenario, with or without the notifier: a run that
// started right after the last one's end (its garbage, Redis freeing its keys) would be slower for it. It
// collects the garbage and waits 20 µs a device, at most 2 s, so each run starts from the same quiet.
func settle(devices int) {
	runtime.GC()
	time.Sleep(min(2*time.Second, time.Duration(devices)*20*time.Microsecond))
}

// awaitNotifierReady polls the notifier's readiness (a member of its group, Redis answering).
func awaitNotifierReady(ctx context.Context, nt *notify.Notifier) error {
	deadline := time.Now().Add(time.Minute)
	for {
		var errs []error
		for _, err := range nt.Ready(ctx) {
			errs = append(errs, err)
		}
		err := errors.Join(errs...)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("notify: the notifier never became ready: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// notificationsHandled sums heartbeatd_notifications_total over its results but "failed" and
// "queued" (a later attempt counts again): every event the notifier routed counts once.
func notificationsHandled(reg *prometheus.Registry) float64 {
	families, err := reg.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, mf := range families {
		if mf.GetName() != "heartbeatd_notifications_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			result := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" {
					result = l.GetValue()
				}
			}
			if result != "failed" && result != "queued" {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
