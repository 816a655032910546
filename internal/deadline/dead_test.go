package deadline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

// park claims dev and parks it with reason, as the alarm loop does after Kafka refused it too often.
func park(t *testing.T, f fixture, dev, reason string) deadline.Claim {
	t.Helper()
	c := claimOne(t, f, dev)
	st := c.State
	st.Failures, st.Reason = 3, reason
	require.Equal(t, []bool{true}, f.ack(t, deadline.Ack{Device: dev, Slot: c.Slot, Op: deadline.Park, Claimed: c.State.Deadline, State: st}))
	f.settle(t, c)
	return c
}

func TestParkedClaimsListedThenRequeuedDueNow(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		for i := range 3 {
			park(t, f, fmt.Sprint("p", i), fmt.Sprint("refused: too large ", i))
		}
		list, err := f.Store.ParkedClaims(ctx, 2)
		require.NoError(t, err)
		require.Len(t, list, 2, "the first few")
		require.Equal(t, "p0", list[0].Device, "the longest parked first")
		require.Equal(t, "refused: too large 0", list[0].Reason)
		require.Equal(t, deadline.Slot("p0", f.Store.Slots()), list[0].Slot)
		require.Equal(t, "p1", list[1].Device)
		f.Clock.Advance(time.Hour)
		require.Empty(t, f.ClaimAll(t, deadline.ClaimOptions{}).Claims, "parked: no act")

		n, err := f.Store.Requeue(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, n)
		counts, err := f.Store.Count(ctx)
		require.NoError(t, err)
		require.Zero(t, counts.Parked)
		list, err = f.Store.ParkedClaims(ctx, 10)
		require.NoError(t, err)
		require.Empty(t, list)

		res := f.ClaimAll(t, deadline.ClaimOptions{})
		require.Equal(t, []string{"p0", "p1", "p2"}, devices(res.Claims), "due at once")
		for _, c := range res.Claims {
			require.Zero(t, c.State.Failures, "%s: a fresh count of attempts", c.Device)
			require.Equal(t, "refused: too large "+c.Device[1:], c.State.Reason)
		}
		n, err = f.Store.Requeue(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "nothing left")
	})
}

// A parked claim whose incident ended meanwhile (the device was deleted) only leaves the dead set.
func TestRequeueDropsParkedClaimsWithoutIncident(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		c := park(t, f, "gone", "refused")
		require.NoError(t, f.RDB.HDel(ctx, f.Store.Keys().State(c.Slot), "gone").Err())
		n, err := f.Store.Requeue(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		counts, err := f.Store.Count(ctx)
		require.NoError(t, err)
		require.Zero(t, counts.Parked)
		require.Zero(t, counts.Pending)
	})
}

// TestParkedClaimRecoversOnItsDevicesNextSignal: WakeParked, the sweep's step, makes due the parked claim
// of a device that signalled again, so its recovery is reported without an operator's requeue; a device
// still silent stays parked.
func TestParkedClaimRecoversOnItsDevicesNextSignal(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		park(t, f, "back", "refused: too large")
		park(t, f, "silent", "refused: too large")
		f.Clock.Advance(time.Minute)
		f.Refresh(t, deadline.Signal{Device: "back", Type: "gateway", Seen: f.Clock.Now()})
		require.Empty(t, f.ClaimAll(t, deadline.ClaimOptions{}).Claims, "parked: the probe does not reach it")

		for slot := range f.Store.Slots() {
			for cursor := uint64(0); ; {
				next, _, err := f.Store.WakeParked(ctx, slot, cursor, 1000)
				require.NoError(t, err)
				if cursor = next; cursor == 0 {
					break
				}
			}
		}
		res := f.ClaimAll(t, deadline.ClaimOptions{})
		require.Equal(t, []string{"back"}, devices(res.Claims), "its recovery is due at once")
		require.Zero(t, res.Claims[0].State.Failures, "a fresh count of attempts")
		list, err := f.Store.ParkedClaims(ctx, 10)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, "silent", list[0].Device, "still silent: still parked")
	})
}
