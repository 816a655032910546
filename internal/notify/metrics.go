package notify

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The results of heartbeatd_notifications_total (docs/metrics.md).
const (
	resultSent = "sent" // the receiver took it (a summary counts once)
	// resultFailed is an attempt that failed and is kept in Redis for a retry.
	resultFailed = "failed"
	// resultQueued went behind the device's queued notifications, or straight to the queue while the
	// receiver is known to be down.
	resultQueued = "queued"
	resultFolded = "folded" // held by the rate limit, told in the next summary
	resultDead   = "dead"   // refused for good, or given up after give_up_after: dead-lettered
	// resultInOutage and resultUnderParent are events the outage's or the parent's message stands for.
	resultInOutage    = "in_outage"
	resultUnderParent = "under_parent"
	// resultDuplicate is an incident's opening the receiver was already told of (a close told twice finds
	// no incident: resultNoIncident).
	resultDuplicate = "duplicate"
)

// metrics are the notifier's Prometheus metrics.
type metrics struct {
	notifications *prometheus.CounterVec
	lag           prometheus.Gauge
	pending       *prometheus.GaugeVec
	badEvents     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "heartbeatd", Name: "notifications_total",
			Help: "Notifications by receiver and result: sent, failed (kept for a retry), queued, folded (into a summary), dead, " +
				"in_outage, under_parent, duplicate, no_incident."}, []string{"receiver", "result"}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "notify_lag_seconds",
			Help: "How long after its write to the events topic the notifier handled the last event."}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "notify_pending",
			Help: "Devices whose notifications wait in Redis for a retry, by receiver."}, []string{"receiver"}),
		badEvents: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "heartbeatd", Name: "notify_bad_events_total",
			Help: "Records of the events topic the notifier could not decode (skipped)."}),
	}
	if reg != nil {
		reg.MustRegister(m.notifications, m.lag, m.pending, m.badEvents)
	}
	return m
}

func (m *metrics) count(receiver, result string) {
	m.notifications.WithLabelValues(receiver, result).Inc()
}
