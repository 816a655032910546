package alarm

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// Metrics are the alarm loop's Prometheus series (SPEC §8).
type Metrics struct {
	Events          *prometheus.CounterVec // kind
	Lateness        prometheus.Histogram   // interrupted: event time − deadline
	ClaimsPending   prometheus.Gauge       // claims this replica holds, published but not yet acknowledged
	DeadClaims      prometheus.Gauge       // parked claims over all slots
	Devices         *prometheus.GaugeVec   // state: online, interrupted
	HoldBack        prometheus.Gauge       // 1 while detection is held back
	PublishFailures prometheus.Counter
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
			Help: "Monitored devices by state (all slots)."}, []string{"state"}),
		HoldBack: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "hold_back",
			Help: "1 while detection is held back because heartbeatd itself could not hear the fleet."}),
		PublishFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "heartbeatd", Name: "publish_failures_total",
			Help: "Claims whose events could not be published (retried with backoff, parked after the limit)."}),
	}
	for _, k := range []event.Kind{event.Interrupted, event.Alarm, event.Recovered, event.Exhausted} {
		m.Events.WithLabelValues(string(k))
	}
	if reg != nil {
		reg.MustRegister(m.Events, m.Lateness, m.ClaimsPending, m.DeadClaims, m.Devices, m.HoldBack, m.PublishFailures)
	}
	return m
}

// RunCounts refreshes devices{state} and dead_claims from Redis every interval until ctx is done.
// Counting is O(slots), so it is cheap at any fleet size.
func (m *Metrics) RunCounts(ctx context.Context, store *deadline.Store, every time.Duration, log *zap.Logger) error {
	loop.Every(ctx, loop.Options{Interval: every, Immediate: true, MaxBackoff: time.Minute,
		OnError: func(err error, _ int, _ time.Duration) { log.Debug("counting devices failed", zap.Error(err)) }},
		func(ctx context.Context) error {
			c, err := store.Count(ctx)
			if err != nil {
				return err
			}
			m.Devices.WithLabelValues("online").Set(float64(c.Online))
			m.Devices.WithLabelValues("interrupted").Set(float64(c.Interrupted))
			m.DeadClaims.Set(float64(c.Parked))
			return nil
		})
	return nil
}
