package daemon

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heartbeatd/heartbeatd/internal/ingest"
)

// registerMetrics registers the daemon's own series (docs/metrics.md): build_info, the slot layout, each
// readiness check and each ingest source's lag. The components register theirs where they are built.
func (d *daemon) registerMetrics(reg prometheus.Registerer) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "build_info",
			Help:        "Always 1; the labels name the running build.",
			ConstLabels: prometheus.Labels{"version": d.opts.Build.Version, "commit": d.opts.Build.Commit, "goversion": runtime.Version()}},
			func() float64 { return 1 }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "slots",
			Help: "Slots in the Redis layout; the replicas' slots_owned add up to it while every slot has an owner."},
			func() float64 { return float64(d.store.Slots()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "heartbeatd", Name: "redis_data_lost_total",
			Help: "Times this replica found that Redis had lost heartbeatd's data (the slot layout written anew, or a slot's epoch marker gone from its Redis Cluster master): a restart without persistence, a failover or a flush."},
			func() float64 { n, _ := d.store.DataLost(); return float64(n) }),
		readyCollector{health: d.health},
		ingest.NewLagCollector(d.sources),
	)
}

// readyDesc is heartbeatd_ready{check}.
var readyDesc = prometheus.NewDesc("heartbeatd_ready", "1 while the readiness check passes (redis, events, clock, each ingest source), as /readyz last found it.",
	[]string{"check"}, nil)

// readyCollector shows the last round of readiness checks: Redis and Kafka health per replica without a
// probe of its own.
type readyCollector struct{ health *Health }

func (c readyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- readyDesc }

func (c readyCollector) Collect(ch chan<- prometheus.Metric) {
	rd, ok := c.health.current()
	if !ok {
		return
	}
	for name, err := range rd.Checks {
		ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, b2f(err == nil), name)
	}
}
