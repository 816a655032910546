package deadline_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/pkg/deadline"
)

// TestRetentionForgetsTheLongSilentUnregistered: of three devices silent past the retention, the
// registered one stays, and one that signalled again stays; the other is forgotten with its links.
func TestRetentionForgetsTheLongSilentUnregistered(t *testing.T) {
	eachBackend(t, 4, func(t *testing.T, f fixture) {
		ctx := context.Background()
		t0 := f.clock.Now()
		f.refresh(t, deadline.Signal{Device: "gone", Type: "gateway", Parent: "gw", Seen: t0},
			deadline.Signal{Device: "kept", Type: "gateway", Seen: t0}, deadline.Signal{Device: "back", Type: "gateway", Seen: t0})
		_, err := f.store.Register(ctx, []string{"kept"}, []deadline.Registration{{Type: "gateway"}}, []string{""})
		require.NoError(t, err)
		f.clock.Advance(time.Hour)
		require.Len(t, f.claimAll(t, deadline.ClaimOptions{Lease: time.Minute}).Claims, 3)
		f.refresh(t, deadline.Signal{Device: "back", Type: "gateway", Seen: f.clock.Now()})

		var forgotten []string
		for slot := range f.store.Slots() {
			for cursor := uint64(0); ; {
				next, gone, err := f.store.ForgetSilent(ctx, slot, cursor, 100, f.clock.Now().Add(-30*time.Minute))
				require.NoError(t, err)
				forgotten = append(forgotten, gone...)
				if cursor = next; cursor == 0 {
					break
				}
			}
		}
		sort.Strings(forgotten)
		require.Equal(t, []string{"gone"}, forgotten)
		_, found := f.device(t, "gone")
		require.False(t, found, "forgotten: no incident, no deadline")
		parents, err := f.store.ParentsOf(ctx, []string{"gone"})
		require.NoError(t, err)
		require.Equal(t, []string{""}, parents, "its parent link went with it")
		_, found = f.device(t, "kept")
		require.True(t, found, "a registered device is expected, never forgotten")
	})
}
