package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
)

// healthOnly is a source that only reports a fixed health.
type healthOnly ingest.Health

func (healthOnly) Name() string                                   { return ingest.SourceMQTT }
func (healthOnly) Run(ctx context.Context, _ *ingest.Chain) error { <-ctx.Done(); return nil }
func (h healthOnly) Health() ingest.Health                        { return ingest.Health(h) }

func TestTrouble(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	cfg := config.Default()
	cfg.Ingest.MaxLag = 30 * time.Second
	d := &daemon{cfg: cfg}
	for _, tc := range []struct {
		name      string
		health    ingest.Health
		wantSince time.Time
		wantWhy   string
	}{
		{"healthy", ingest.Health{Connected: true, Since: now.Add(-time.Hour)}, time.Time{}, ""},
		{"lag within the threshold", ingest.Health{Connected: true, Lag: 30 * time.Second}, time.Time{}, ""},
		{"disconnected", ingest.Health{Since: now.Add(-time.Minute), Lag: time.Hour}, now.Add(-time.Minute), "disconnected"},
		{"lagging", ingest.Health{Connected: true, Lag: 45 * time.Second}, now.Add(-45 * time.Second), "lagging 45s behind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			since, why := d.trouble(healthOnly(tc.health), now)
			require.Equal(t, tc.wantWhy, why)
			require.True(t, tc.wantSince.Equal(since), "since %v, want %v", since, tc.wantSince)
		})
	}
}
