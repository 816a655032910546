package alarm

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// Metrics are the alarm loop's Prometheus series (docs/metrics.md).
type Metrics struct {
	Events          *prometheus.CounterVec // kind
	Lateness        prometheus.Histogram   // interrupted: event time − deadline
	ClaimsPending   prometheus.Gauge       // claims this replica holds, published but not yet acknowledged
	DeadClaims      prometheus.Gauge       // parked claims over all slots
	Devices         *prometheus.GaugeVec   // state (online, interrupted), type: in this replica's slots
	HoldBack        prometheus.Gauge       // 1 while detection is held back
	PublishFailures prometheus.Counter
	// WatchdogPublished is when Kafka last acknowledged this replica's watchdog event (Unix seconds).
	WatchdogPublished prometheus.Gauge
	// Forgotten counts devices forgotten by retention.forget_after.
	Forgotten prometheus.Counter
	// OutagesOpen is set by the correlator; it stays 0 while correlation is off, so alerts and
	// dashboards on it need no "absent" case.
	OutagesOpen prometheus.Gauge
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
		HoldBack: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "hold_back",
			Help: "1 while detection is held back because heartbeatd itself could not hear the fleet."}),
		PublishFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "heartbeatd", Name: "publish_failures_total",
			Help: "Claims whose events could not be published (retried with backoff, parked after the limit)."}),
		WatchdogPublished: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "watchdog_last_published_timestamp_seconds",
			Help: "When Kafka last acknowledged this replica's watchdog event (Unix time); 0 before the first."}),
		Forgotten: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "heartbeatd", Name: "devices_forgotten_total",
			Help: "Devices forgotten after retention.forget_after of silence, not being registered."}),
		OutagesOpen: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "outages_open",
			Help: "Correlated outages open now; 0 while correlation is off (docs/concepts.md)."}),
	}
	for _, k := range []event.Kind{event.Interrupted, event.Late, event.Alarm, event.Recovered, event.Exhausted, event.Watchdog,
		event.Suppressed, event.Flapping, event.OutageStarted, event.OutageEnded} {
		m.Events.WithLabelValues(string(k))
	}
	if reg != nil {
		reg.MustRegister(m.Events, m.Lateness, m.ClaimsPending, m.DeadClaims, m.Devices, m.HoldBack, m.PublishFailures,
			m.WatchdogPublished, m.Forgotten, m.OutagesOpen)
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
// slots, a scan of their devices) current until ctx is done. A type scan runs at start, whenever the owned
// slots or the types changed, and otherwise Every after the last one ended. Each scan is paced to keep
// Redis busy at most loop.DefaultWalkShare of the time, whatever the fleet's size: a 5M-device share,
// about 16 s of Redis time, takes about 13 minutes (docs/scaling.md, "Walks").
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
	var wg sync.WaitGroup
	// dead_claims on its own loop: a paced type scan of a large fleet lasts minutes.
	wg.Go(func() {
		loop.Every(ctx, opts, func(ctx context.Context) error {
			c, err := o.Store.Count(ctx)
			if err == nil {
				m.DeadClaims.Set(float64(c.Parked))
			}
			return err
		})
	})
	var (
		scanned   bool
		next      time.Time
		lastSlots []int
		types     []string
		shown     = map[[2]string]bool{}
	)
	loop.Every(ctx, opts, func(ctx context.Context) error {
		slots, names := slices.Sorted(slices.Values(o.Slots())), slices.Sorted(slices.Values(o.Types()))
		if scanned && time.Now().Before(next) && slices.Equal(slots, lastSlots) && slices.Equal(names, types) {
			return nil
		}
		online, interrupted, err := o.Store.CountTypesIn(ctx, slots, loop.Pacer{Share: loop.DefaultWalkShare})
		if err != nil {
			return err
		}
		scanned, next, lastSlots, types = true, time.Now().Add(o.Every), slots, names
		m.setDevices(shown, names, online, interrupted)
		return nil
	})
	wg.Wait()
	return nil
}

// setDevices shows the counts of one scan, zeros for configured types without devices, and removes the
// series of types neither has any more (a type removed by reload), without a moment of missing series.
func (m *Metrics) setDevices(shown map[[2]string]bool, types []string, online, interrupted map[string]int64) {
	now := map[[2]string]bool{}
	for state, counts := range map[string]map[string]int64{"online": online, "interrupted": interrupted} {
		for _, t := range types {
			if _, ok := counts[t]; !ok {
				counts[t] = 0
			}
		}
		for t, n := range counts {
			m.Devices.WithLabelValues(state, t).Set(float64(n))
			now[[2]string{state, t}] = true
		}
	}
	for k := range shown {
		if !now[k] {
			m.Devices.DeleteLabelValues(k[0], k[1])
			delete(shown, k)
		}
	}
	for k := range now {
		shown[k] = true
	}
}
