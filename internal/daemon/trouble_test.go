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

func TestHoldBackTrouble(t *testing.T) {
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
			got := d.probeTrouble(healthOnly(tc.health), now)
			require.Equal(t, tc.wantWhy, got.Why)
			require.True(t, tc.wantSince.Equal(got.Since), "since %v, want %v", got.Since, tc.wantSince)
		})
	}
}

// TestReadinessCountsOwnShare: a replica is ready once it reads its own share of the signals in time.
// The rest of a consumer group lagging or rebalancing (a dead member's partitions not yet reassigned)
// holds detection back and is noted, but does not make a survivor unready.
func TestReadinessCountsOwnShare(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	cfg := config.Default()
	cfg.Ingest.MaxLag = 2 * time.Second
	d := &daemon{cfg: cfg}
	for _, tc := range []struct {
		name        string
		health      ingest.Health
		wantUnready string
		wantNote    bool
	}{
		{"healthy", ingest.Health{Connected: true}, "", false},
		{"the group lags, its own share is read",
			ingest.Health{Connected: true, Lag: 12 * time.Second, OwnLag: 10 * time.Millisecond, Kept: true, BlindShared: true}, "", true},
		{"the group rebalances, its own share is read",
			ingest.Health{Connected: true, Blind: now.Add(-5 * time.Second), BlindWhy: "rebalancing", Kept: true, BlindShared: true}, "", true},
		{"its own share lags", ingest.Health{Connected: true, Lag: 5 * time.Second, OwnLag: 5 * time.Second, Kept: true, BlindShared: true},
			"lagging 5s behind", false},
		{"its own probe is not back", ingest.Health{Connected: true, Blind: now.Add(-4 * time.Second), BlindWhy: "no probe came back"},
			"no probe came back since 2026-11-22T09:59:56Z", false},
		{"disconnected", ingest.Health{Since: now.Add(-time.Minute)}, "disconnected since 2026-11-22T09:59:00Z", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := healthOnly(tc.health)
			require.Equal(t, tc.wantUnready, d.unready(src))
			require.Equal(t, tc.wantNote, d.groupNote(src, now) != "", "note: %q", d.groupNote(src, now))
		})
	}
}
