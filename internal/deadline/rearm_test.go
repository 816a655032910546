package deadline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

// deferTo claims every due incident and schedules each one's next act at the time next gives it, as
// the alarm loop does for the incidents a silence defers.
func deferTo(t *testing.T, f fixture, next func(device string) time.Time) {
	t.Helper()
	res := f.claimAll(t, deadline.ClaimOptions{})
	acks := make([]deadline.Ack, 0, len(res.Claims))
	for _, c := range res.Claims {
		acks = append(acks, reschedule(c, sentOnce(c), next(c.Device)))
	}
	_, err := f.store.Settle(context.Background(), acks, deadline.RecordsOf(res.Claims))
	require.NoError(t, err)
}

// TestRearmMovesExactlyWhatWasDeferred: re-arming a type moves its incidents deferred to the given end,
// over several batches of a slot, and leaves other types' and other ends' alone; re-arming a device
// moves that device only when it is deferred to that end.
func TestRearmMovesExactlyWhatWasDeferred(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		deadline.SetRearmBatch(t, 3)
		t0 := f.clock.Now()
		until, later := t0.Add(time.Hour), t0.Add(2*time.Hour)
		f.refresh(t, fleet(60, "g-", t0, gateways)...) // several batches in every slot of 8
		f.refresh(t, deadline.Signal{Device: "other", Type: "default", Seen: t0},
			deadline.Signal{Device: "late", Type: "gateway", Seen: t0})
		f.clock.Advance(61 * time.Second)
		deferTo(t, f, func(device string) time.Time {
			if device == "late" {
				return later
			}
			return until
		})

		at := f.clock.Now().Add(2 * time.Second)
		moved, err := f.store.RearmType(ctx, "gateway", until, at)
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

		moved, err = f.store.RearmDevice(ctx, "late", until, at)
		require.NoError(t, err)
		require.Zero(t, moved, "deferred to another end")
		moved, err = f.store.RearmDevice(ctx, "other", until, at)
		require.NoError(t, err)
		require.Equal(t, 1, moved)
		d, _ := f.device(t, "other")
		require.Equal(t, at.UnixMilli(), d.NextAct.UnixMilli())
	})
}
