package alarm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/correlate"
)

// scrape is reg as /metrics serves it (text exposition).
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var out strings.Builder
	for _, mf := range mfs {
		_, err := expfmt.MetricFamilyToText(&out, mf)
		require.NoError(t, err)
	}
	return out.String()
}

// TestOutageMetrics: without a correlator heartbeatd_outages_open is exported as 0. With one, a scrape
// counts outage_started and outage_ended in heartbeatd_events_total like the devices' events, and
// outages_open follows the outage: 1 while it lasts, 0 once it ended.
func TestOutageMetrics(t *testing.T) {
	off := prometheus.NewRegistry()
	NewMetrics(off)
	correlate.NewMetrics(off)
	require.Nil(t, correlate.New(correlate.Options{}), "correlation off")
	require.Contains(t, scrape(t, off), "heartbeatd_outages_open 0\n")

	eachFixture(t, func(t *testing.T, f *fixture) {
		reg := prometheus.NewRegistry()
		m := NewMetrics(reg)
		corr := correlate.New(correlate.Options{Client: f.rdb, Store: f.store, Sink: f.sink, ReplicaID: "r1", Now: f.clock.Now,
			Correlation: config.Correlation{By: []string{config.CorrelateByType}, MinDevices: 5, Window: 10 * time.Second},
			Events:      m.Events, Metrics: correlate.NewMetrics(reg)})
		f.handler = NewHandler(HandlerOptions{Store: f.store, Sink: f.sink, Policies: f.policies.Load, Correlator: corr, Now: f.clock.Now,
			Metrics: m})
		ctx := context.Background()
		var gws []string
		for i := range 5 {
			gws = append(gws, fmt.Sprintf("gw%d", i))
			f.signal(gws[i], "gateway", 0) // timeout 5s
		}
		require.Len(t, f.at(5*time.Second+5*time.Millisecond), 6, "outage_started and its five members")
		require.NoError(t, corr.Tick(ctx))
		got := scrape(t, reg)
		for _, want := range []string{`heartbeatd_events_total{kind="interrupted"} 5`, `heartbeatd_events_total{kind="outage_started"} 1`,
			`heartbeatd_events_total{kind="outage_ended"} 0`, "heartbeatd_outages_open 1"} {
			require.Contains(t, got, want+"\n")
		}

		for _, d := range gws {
			f.signal(d, "gateway", 10*time.Second)
		}
		require.Len(t, f.at(10*time.Second+5*time.Millisecond), 5, "recovered")
		f.clock.Set(f.t0.Add(12 * time.Second))
		require.NoError(t, corr.Tick(ctx)) // ends it
		require.NoError(t, corr.Tick(ctx))
		require.Len(t, f.sink.Take(), 1, "outage_ended")
		got = scrape(t, reg)
		for _, want := range []string{`heartbeatd_events_total{kind="outage_started"} 1`, `heartbeatd_events_total{kind="outage_ended"} 1`,
			`heartbeatd_events_total{kind="recovered"} 5`, "heartbeatd_outages_open 0"} {
			require.Contains(t, got, want+"\n")
		}
	})
}
