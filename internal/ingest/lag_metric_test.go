package ingest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/ingest"
)

// lagging is a source whose health says it is lag behind.
type lagging struct {
	name string
	lag  time.Duration
}

func (s lagging) Name() string                                   { return s.name }
func (s lagging) Run(ctx context.Context, _ *ingest.Chain) error { <-ctx.Done(); return nil }
func (s lagging) Health() ingest.Health                          { return ingest.Health{Connected: true, Lag: s.lag} }

// heartbeatd_ingest_lag_seconds shows each source's Health().Lag, the value the hold-back judges.
func TestLagCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(ingest.NewLagCollector([]ingest.Source{lagging{ingest.SourceMQTT, 0},
		lagging{ingest.SourceKafka, 2500 * time.Millisecond}}))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var out strings.Builder
	for _, mf := range mfs {
		_, err := expfmt.MetricFamilyToText(&out, mf)
		require.NoError(t, err)
	}
	require.Contains(t, out.String(), "# TYPE heartbeatd_ingest_lag_seconds gauge\n")
	require.Contains(t, out.String(), "heartbeatd_ingest_lag_seconds{source=\"kafka\"} 2.5\n")
	require.Contains(t, out.String(), "heartbeatd_ingest_lag_seconds{source=\"mqtt\"} 0\n")
}
