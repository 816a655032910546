package ingest

import (
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

// Results of a signal, the `result` label of heartbeatd_signals_total.
const (
	resultApplied    = "applied"    // its deadline write was acknowledged by Redis
	resultCoalesced  = "coalesced"  // acknowledged without a write: one within ingest.coalesce was made
	resultDeadLetter = "deadletter" // bad input, sent to the dead-letter topic
	resultRetained   = "retained"   // an MQTT retained message: a replay of an old signal, not a live one
	resultShed       = "shed"       // an MQTT QoS 0 message dropped: too many were waiting for Redis
	resultLate       = "late"       // acknowledged unwritten: its deadline (ts + timeout) had already passed
	resultIgnored    = "ignored"    // a presence subscription's message whose payload no subscription takes
)

// The `result` label of heartbeatd_signals_marked_total: what a reported failure or an offline message
// did (deadline.MarkResult), by index.
var markResults = [...]string{
	deadline.MarkMoved:      "moved",
	deadline.MarkLate:       "late",
	deadline.MarkNotEarlier: "not_earlier",
	deadline.MarkOpen:       "open",
	deadline.MarkUnknown:    "unknown",
}

type metrics struct {
	signals        *prometheus.CounterVec
	deadLetters    *prometheus.CounterVec
	refresh        prometheus.Histogram
	refreshErrors  prometheus.Counter
	connected      *prometheus.GaugeVec
	clamped        *prometheus.CounterVec
	unknownTypes   prometheus.Counter
	deadLetterLost prometheus.Counter
	marked         *prometheus.CounterVec

	// sources is copied on write: every signal reads it, a new source name is rare.
	mu      sync.Mutex
	sources atomic.Pointer[map[string]*sourceMetrics]
}

// sourceMetrics are one source's counters, resolved once so the hot path does no label lookups.
type sourceMetrics struct {
	applied, coalesced, deadLetter, retained, shed, late, ignored, clamped prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		signals: counterVec("heartbeatd_signals_total",
			"Signals taken in, by source and result (applied, coalesced, deadletter, retained, shed, late, ignored).", "source", "result"),
		deadLetters: counterVec("heartbeatd_deadletters_total", "Bad input sent to the dead-letter topic, by reason.", "reason"),
		refresh: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "heartbeatd_refresh_duration_seconds",
			Help:    "Duration of one batched deadline refresh in Redis (every attempt).",
			Buckets: []float64{.0002, .0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		refreshErrors: counter("heartbeatd_refresh_errors_total",
			"Failed deadline refresh attempts (each is retried with backoff; nothing is acknowledged meanwhile)."),
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "heartbeatd_ingest_connected",
			Help: "1 while an ingest source is connected to its broker.",
		}, []string{"source"}),
		clamped: counterVec("heartbeatd_signals_clamped_total",
			"Signals whose ts was further in the future than ingest.max_clock_skew; the receive time was used.", "source"),
		unknownTypes: counter("heartbeatd_signals_unknown_type_total",
			"Signals naming a device type without a configured policy (the default policy applies)."),
		deadLetterLost: counter("heartbeatd_deadletters_lost_total",
			"Bad input acknowledged without its dead letter: the dead-letter topic failed or its queue was full."),
		marked: counterVec("heartbeatd_signals_marked_total",
			"Reported failures and offline messages, by cause (reported, offline) and result: moved (the deadline moved earlier), late (the device signalled after it), not_earlier, open (already interrupted), unknown (presence for a device Redis does not know: nothing created).",
			"cause", "result"),
	}
	m.sources.Store(&map[string]*sourceMetrics{})
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.signals, m.deadLetters, m.refresh, m.refreshErrors, m.connected, m.clamped, m.unknownTypes, m.deadLetterLost, m.marked} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("ingest: metrics already registered (one Chain per registry): %w", err)
			}
			return nil, fmt.Errorf("ingest: register metrics: %w", err)
		}
	}
	// Pre-create the bounded label values so dashboards see zeros instead of missing series.
	for _, r := range Reasons {
		m.deadLetters.WithLabelValues(r)
	}
	return m, nil
}

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func (m *metrics) source(name string) *sourceMetrics {
	if s := (*m.sources.Load())[name]; s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.sources.Load()
	if s := old[name]; s != nil {
		return s
	}
	s := &sourceMetrics{
		applied:    m.signals.WithLabelValues(name, resultApplied),
		coalesced:  m.signals.WithLabelValues(name, resultCoalesced),
		deadLetter: m.signals.WithLabelValues(name, resultDeadLetter),
		retained:   m.signals.WithLabelValues(name, resultRetained),
		shed:       m.signals.WithLabelValues(name, resultShed),
		late:       m.signals.WithLabelValues(name, resultLate),
		ignored:    m.signals.WithLabelValues(name, resultIgnored),
		clamped:    m.clamped.WithLabelValues(name),
	}
	next := maps.Clone(old)
	next[name] = s
	m.sources.Store(&next)
	return s
}

// lagCollector is heartbeatd_ingest_lag_seconds: each source's Health().Lag, read at scrape time, so the
// metric and the hold-back (which reads the same Health) never disagree.
type lagCollector struct {
	desc    *prometheus.Desc
	sources []Source
}

// NewLagCollector returns the collector of heartbeatd_ingest_lag_seconds{source} for sources; the daemon
// registers it once it built them.
func NewLagCollector(sources []Source) prometheus.Collector {
	return lagCollector{sources: sources, desc: prometheus.NewDesc("heartbeatd_ingest_lag_seconds",
		"How far an ingest source is behind: the age of its oldest message not yet stored in Redis, or of a Kafka backlog being worked off; 0 when caught up.",
		[]string{"source"}, nil)}
}

func (c lagCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c lagCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.sources {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, s.Health().Lag.Seconds(), s.Name())
	}
}
