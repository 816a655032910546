package alarm

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// Metrics are the alarm loop's Prometheus series (docs/metrics.md); the hold-back, the correlator and
// retention register their own (internal/holdback, internal/correlate, internal/deadline).
type Metrics struct {
	Events          *prometheus.CounterVec // kind
	Lateness        prometheus.Histogram   // interrupted: event time − deadline
	ClaimsPending   prometheus.Gauge       // claims this replica holds, published but not yet acknowledged
	DeadClaims      prometheus.Gauge       // parked claims over all slots
	Devices         *prometheus.GaugeVec   // state (online, interrupted), type: in this replica's slots
	PublishFailures prometheus.Counter
	// LapsedClaims counts the claims left unpublished because their lease was running out (Handler.dropLapsed).
	LapsedClaims prometheus.Counter
	// WatchdogPublished is when Kafka last acknowledged this replica's watchdog event (Unix seconds).
	WatchdogPublished prometheus.Gauge
}

// NewMetrics creates the series and registers them with reg (nil = not registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "heartbeatd", Name: "events_total",
			Help: "Events published to Kafka, by kind."}, []string{"kind"}),
		Lateness: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "heartbeatd", Name: "detection_lateness_seconds",
			Help:    "Time from a passed deadline to its interrupted event (event time − deadline).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}}),
		ClaimsPending: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "claims_pending",
			Help: "Claims this replica is publishing and has not acknowledged yet."}),
		DeadClaims: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "dead_claims",
			Help: "Claims parked after too many publish failures (all slots); see /v1/stats."}),
		Devices: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "devices",
			Help: "Monitored devices by state and type in the slots this replica owns (sum over replicas for the fleet), counted by a periodic scan."},
			[]string{"state", "type"}),
		PublishFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "heartbeatd", Name: "publish_failures_total",
			Help: "Claims whose events could not be published (retried with backoff, parked after the limit)."}),
		LapsedClaims: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "heartbeatd", Name: "claims_lapsed_total",
			Help: "Claims left to their next claim, unpublished, because their lease was running out (a stalled replica)."}),
		WatchdogPublished: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "watchdog_last_published_timestamp_seconds",
			Help: "When Kafka last acknowledged this replica's watchdog event (Unix time); 0 before the first."}),
	}
	for _, k := range []event.Kind{event.Interrupted, event.Late, event.Alarm, event.Recovered, event.Exhausted, event.Watchdog,
		event.Suppressed, event.Flapping, event.OutageStarted, event.OutageEnded} {
		m.Events.WithLabelValues(string(k))
	}
	if reg != nil {
		reg.MustRegister(m.Events, m.Lateness, m.ClaimsPending, m.DeadClaims, m.Devices, m.PublishFailures, m.LapsedClaims, m.WatchdogPublished)
	}
	return m
}

// CountsOptions configures RunCounts.
type CountsOptions struct {
	Store *deadline.Store
	// Slots are the slots this replica owns: devices{state,type} counts only them, so the replicas share
	// the scan and their series add up to the fleet.
	Slots func() []int
	// Types are the configured type names, shown at 0 where none of their devices are in Slots.
	Types func() []string
	// Every is how often dead_claims is counted, and the shortest time between two type scans
	// (default 5s).
	Every  time.Duration
	Logger *zap.Logger
}

// RunCounts keeps dead_claims (all slots, O(slots), every Every) and devices{state,type} (this replica's
// slots) current until ctx is done. The two states are two walks: `interrupted` reads the open incidents
// every Every, so it follows an outage within seconds; `online` reads every device, at start, whenever
// the owned slots or the types changed, and otherwise Every after its last pass ended. Each walk is paced
// so that the replicas' walks together keep Redis busy at most loop.DefaultWalkShare of the time,
// whatever the fleet's size and the replicas' count: 10M online devices, about 24 s of Redis time, take
// about 20 minutes (docs/scaling.md, "Walks").
func (m *Metrics) RunCounts(ctx context.Context, o CountsOptions) error {
	if o.Every <= 0 {
		o.Every = 5 * time.Second
	}
	if o.Types == nil {
		o.Types = func() []string { return nil }
	}
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	log = log.With(zap.String("component", "counts"))
	opts := loop.Options{Interval: o.Every, Immediate: true, MaxBackoff: time.Minute,
		OnError: func(err error, _ int, _ time.Duration) { log.Debug("counting devices failed", zap.Error(err)) }}
	pacer := func(owned int) loop.Pacer {
		return loop.Pacer{Share: loop.DefaultWalkShare}.Of(owned, o.Store.Slots())
	}
	var wg sync.WaitGroup
	// dead_claims on its own loop: a paced walk of a large fleet lasts minutes.
	wg.Go(func() {
		loop.Every(ctx, opts, func(ctx context.Context) error {
			c, err := o.Store.Count(ctx)
			if err == nil {
				m.DeadClaims.Set(float64(c.Parked))
			}
			return err
		})
	})
	wg.Go(func() {
		shown := map[string]bool{}
		loop.Every(ctx, opts, func(ctx context.Context) error {
			slots, names := o.Slots(), o.Types()
			counts, err := o.Store.CountIncidentsIn(ctx, slots, pacer(len(slots)))
			if err == nil {
				m.setDevices("interrupted", shown, names, counts)
			}
			return err
		})
	})
	var (
		scanned   bool
		next      time.Time
		lastSlots []int
		types     []string
		shown     = map[string]bool{}
	)
	loop.Every(ctx, opts, func(ctx context.Context) error {
		slots, names := slices.Sorted(slices.Values(o.Slots())), slices.Sorted(slices.Values(o.Types()))
		if scanned && time.Now().Before(next) && slices.Equal(slots, lastSlots) && slices.Equal(names, types) {
			return nil
		}
		online, err := o.Store.CountOnlineIn(ctx, slots, pacer(len(slots)))
		if err != nil {
			return err
		}
		scanned, next, lastSlots, types = true, time.Now().Add(o.Every), slots, names
		m.setDevices("online", shown, names, online)
		return nil
	})
	wg.Wait()
	return nil
}

// setDevices shows one walk's counts of state, zeros for configured types without devices, and removes
// the series of types it has none of any more (a type removed by reload), without a moment of missing
// series; shown is the walk's own record of the types it shows.
func (m *Metrics) setDevices(state string, shown map[string]bool, types []string, counts map[string]int64) {
	for _, t := range types {
		if _, ok := counts[t]; !ok {
			counts[t] = 0
		}
	}
	for t, n := range counts {
		m.Devices.WithLabelValues(state, t).Set(float64(n))
	}
	for t := range shown {
		if _, ok := counts[t]; !ok {
			m.Devices.DeleteLabelValues(state, t)
			delete(shown, t)
		}
	}
	for t := range counts {
		shown[t] = true
	}
}
