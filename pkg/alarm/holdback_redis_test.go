package alarm

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
)

// TestHoldBackRedisOutage: while Redis refuses writes no signal is stored, so deadlines that pass during
// the outage must not be claimed when Redis returns, before the sources' backlog is stored: the hold
// starts at the last successful share, applies at once (no tick needed after Redis is back), and ends
// a grace after Redis takes writes again.
func TestHoldBackRedisOutage(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := srv.Client(t)
	store, err := deadline.New(rdb, deadline.Options{Slots: 4, Timeout: func(string) time.Duration { return time.Minute }})
	require.NoError(t, err)
	t0 := time.UnixMilli(1_763_800_000_000)
	var mu sync.Mutex
	now := t0
	at := func(d time.Duration) time.Time { mu.Lock(); defer mu.Unlock(); now = t0.Add(d); return now }
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	var changes []bool
	hb := NewHoldBack(HoldBackOptions{Client: rdb, Keys: store.Keys(), ReplicaID: "r1", Now: clock,
		Grace: func() time.Duration { return 10 * time.Second }, OnChange: func(active bool) { changes = append(changes, active) }})
	ctx := context.Background()
	require.NoError(t, hb.Start(ctx))
	require.NoError(t, hb.tick(ctx))
	require.False(t, hb.Status().Active)

	srv.Stop(t)
	at(5 * time.Second)
	require.Error(t, hb.tick(ctx))
	st := hb.Status()
	require.True(t, st.Active, "Redis refusing writes is an outage of ours")
	require.Equal(t, t0, st.Since, "the hold starts when Redis last took a write")
	require.Equal(t, redisUnreachable, st.Reason)
	require.Equal(t, t0, hb.Watermark(at(6*time.Second)))

	srv.Start(t)
	require.Equal(t, t0, hb.Watermark(at(20*time.Second)), "held before any tick saw Redis back")
	require.NoError(t, hb.tick(ctx))
	require.NoError(t, hb.tick(ctx))
	st = hb.Status()
	require.True(t, st.Active, "grace after Redis is back")
	require.Equal(t, t0.Add(30*time.Second), st.Until)
	require.Equal(t, t0, hb.Watermark(at(29*time.Second)))

	at(30*time.Second + time.Millisecond)
	require.NoError(t, hb.tick(ctx))
	require.False(t, hb.Status().Active, "the hold ends after the grace")
	require.Equal(t, clock(), hb.Watermark(clock()))
	require.Equal(t, []bool{true, false}, changes)
}
