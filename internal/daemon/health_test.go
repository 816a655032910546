package daemon

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestHealthChecksInTheBackgroundAndStops: rounds run every interval in one goroutine that stop ends;
// each change of a check is logged once (the log is where the reasons go that /readyz hides).
func TestHealthChecksInTheBackgroundAndStops(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	core, logs := observer.New(zap.InfoLevel)
	var rounds atomic.Int64
	var failing atomic.Bool
	h := newHealth(func(ctx context.Context) map[string]error {
		rounds.Add(1)
		if failing.Load() {
			return map[string]error{"redis": errors.New("connection refused"), "events": nil}
		}
		return map[string]error{"redis": nil, "events": nil}
	}, HealthOptions{Interval: 5 * time.Millisecond, Logger: zap.New(core)})
	_, ok := h.current()
	require.False(t, ok)

	stop := h.Start(context.Background())
	require.Equal(t, int64(1), rounds.Load(), "Start returns after the first round")
	require.Eventually(t, func() bool { return rounds.Load() >= 3 }, 10*time.Second, time.Millisecond)
	r, ok := h.current()
	require.True(t, ok)
	require.True(t, r.ready())

	failing.Store(true)
	require.Eventually(t, func() bool { r, _ := h.current(); return !r.ready() }, 10*time.Second, time.Millisecond)
	at := rounds.Load()
	require.Eventually(t, func() bool { return rounds.Load() >= at+3 }, 10*time.Second, time.Millisecond)
	failing.Store(false)
	require.Eventually(t, func() bool { r, _ := h.current(); return r.ready() }, 10*time.Second, time.Millisecond)
	stop()
	after := rounds.Load()

	require.Equal(t, 1, logs.FilterMessage("not ready").FilterField(zap.String("check", "redis")).Len(), "logged once, not every round")
	require.Equal(t, 1, logs.FilterMessage("ready again").Len())
	require.Equal(t, after, rounds.Load(), "no round after stop")
	r, _ = h.current()
	require.False(t, r.ready(), "stopped: not ready")
	require.ErrorIs(t, r.Checks["heartbeatd"], errStopping)
}
