package deadline_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

func TestAcknowledgeRescheduleRemovePark(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		c := claimOne(t, f, "d")
		st := sentOnce(c)
		st.InterruptedAt = f.Clock.Now().UnixMilli()
		require.Equal(t, []bool{true}, f.ack(t, reschedule(c, st, f.Clock.Now().Add(time.Minute))))
		d, _ := f.device(t, "d")
		require.Equal(t, f.Clock.Now().Add(time.Minute).UnixMilli(), d.NextAct.UnixMilli())
		require.Equal(t, 1, d.Incident.Next)

		f.Clock.Advance(59 * time.Second)
		require.Empty(t, f.ClaimAll(t, deadline.ClaimOptions{}).Claims)
		f.Clock.Advance(time.Second)
		rep := f.ClaimAll(t, deadline.ClaimOptions{})
		require.Len(t, rep.Claims, 1)
		require.Equal(t, 1, rep.Claims[0].State.Next)

		// An ack for another incident (wrong deadline) is ignored.
		other := remove(c)
		other.Claimed--
		require.Equal(t, []bool{false}, f.ack(t, other))

		st.Failures, st.Reason = 10, "kafka: broker unreachable"
		require.Equal(t, []bool{true}, f.ack(t, deadline.Ack{Device: "d", Slot: c.Slot, Op: deadline.Park, Claimed: c.State.Deadline, State: st}))
		d, _ = f.device(t, "d")
		require.True(t, d.Parked)
		require.Equal(t, "kafka: broker unreachable", d.Incident.Reason)
		counts, err := f.Store.Count(ctx)
		require.NoError(t, err)
		require.Equal(t, deadline.Counts{Interrupted: 1, Parked: 1}, counts)

		require.Equal(t, []bool{true}, f.ack(t, remove(c)))
		_, found := f.device(t, "d")
		require.False(t, found)
	})
}

// TestAcksOfOneDeviceInOneCallApplyInOrder: a slot's acks go to Redis as one call; two for the same
// device must behave as if sent one after the other, and the batch must span more than one call.
func TestAcksOfOneDeviceInOneCallApplyInOrder(t *testing.T) {
	eachFixture(t, 1, func(t *testing.T, f fixture) {
		c := claimOne(t, f, "d")
		resched := reschedule(c, sentOnce(c), f.Clock.Now().Add(time.Hour))
		acks := []deadline.Ack{resched, remove(c), resched}
		for range 1500 { // past one call's limit: the rest must still apply, and in order
			acks = append(acks, remove(c))
		}
		applied := f.ack(t, acks...)
		require.Equal(t, []bool{true, true, false}, applied[:3], "the reschedule applies, the remove ends the incident, the repeat finds it gone")
		require.NotContains(t, applied[3:], true)
		_, found := f.device(t, "d")
		require.False(t, found, "removed, and not resurrected by the later reschedule")
	})
}

func TestAckDoesNotClobberSignalArrivedMeanwhile(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		c := claimOne(t, f, "d")
		// The device signals while the claim is being published.
		f.Refresh(t, deadline.Signal{Device: "d", Seen: f.Clock.Now()})
		f.ack(t, reschedule(c, sentOnce(c), f.Clock.Now().Add(time.Hour)))
		res := f.ClaimAll(t, deadline.ClaimOptions{})
		require.Len(t, res.Claims, 1, "the recovery is due now, not in an hour")
		cur, err := f.Store.CurrentDeadlines(context.Background(), res.Claims)
		require.NoError(t, err)
		require.Greater(t, cur[0].UnixMilli(), c.State.Deadline)
	})
}

func TestOperatorAckSurvivesInFlightReschedule(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		c := claimOne(t, f, "d")
		ok, err := f.Store.SetAcked(ctx, "d", 0)
		require.NoError(t, err)
		require.True(t, ok)
		f.ack(t, reschedule(c, sentOnce(c), f.Clock.Now().Add(time.Minute)))
		d, _ := f.device(t, "d")
		require.True(t, d.Incident.Acked)
		require.Equal(t, 1, d.Incident.Next)
		ok, err = f.Store.SetAcked(ctx, "never-seen", 0)
		require.NoError(t, err)
		require.False(t, ok)
	})
}
