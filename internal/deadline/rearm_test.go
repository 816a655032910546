package deadline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

// TestRearmMovesExactlyWhatWasDeferred: re-arming a type moves its incidents deferred to the given end,
// over several batches of a slot, and leaves other types' and other ends' alone; re-arming a device
// moves that device only when it is deferred to that end.
func TestRearmMovesExactlyWhatWasDeferred(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		deadline.SetRearmBatch(t, 3)
		t0 := f.Clock.Now()
		until, later := t0.Add(time.Hour), t0.Add(2*time.Hour)
		f.Refresh(t, fleet(60, "g-", t0, gateways)...) // several batches in every slot of 8
		f.Refresh(t, deadline.Signal{Device: "other", Type: "default", Seen: t0},
			deadline.Signal{Device: "late", Type: "gateway", Seen: t0})
		f.Clock.Advance(61 * time.Second)
		f.DeferAll(t, func(device string) time.Time {
			if device == "late" {
				return later
			}
			return until
		})

		at := f.Clock.Now().Add(2 * time.Second)
		moved, err := f.Store.RearmType(ctx, "gateway", until, at)
		require.NoError(t, err)
		require.Equal(t, 60, moved)
		for i := range 60 {
			d, _ := f.device(t, fmt.Sprint("g-", i))
			require.Equal(t, at.UnixMilli(), d.NextAct.UnixMilli(), "g-%d", i)
		}
		for device, want := range map[string]time.Time{"other": until, "late": later} {
			d, _ := f.device(t, device)
			require.Equal(t, want.UnixMilli(), d.NextAct.UnixMilli(), device)
		}

		moved, err = f.Store.RearmDevice(ctx, "late", until, at)
		require.NoError(t, err)
		require.Zero(t, moved, "deferred to another end")
		moved, err = f.Store.RearmDevice(ctx, "other", until, at)
		require.NoError(t, err)
		require.Equal(t, 1, moved)
		d, _ := f.device(t, "other")
		require.Equal(t, at.UnixMilli(), d.NextAct.UnixMilli())
	})
}
