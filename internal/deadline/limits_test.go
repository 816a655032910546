package deadline_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

// TestBatchesPastLuaUnpackLimit runs every script path whose lists follow a configured batch with
// detection.batch and ingest.batch at 10000, all in one slot: Redis 7.0's Lua refuses to unpack 8000
// values or more, and a claim or refresh of that many devices hands Redis lists of twice as many.
func TestBatchesPastLuaUnpackLimit(t *testing.T) {
	const n = 10000
	untyped := func(int) string { return "" }
	eachFixture(t, 1, func(t *testing.T, f fixture) {
		ctx := context.Background()
		// One untyped refresh of n devices: one script call writing n deadlines (and probing n entries).
		f.Refresh(t, fleet(n, "d", f.Clock.Now(), untyped)...)
		c, err := f.Store.Count(ctx)
		require.NoError(t, err)
		require.EqualValues(t, n, c.Online)

		// Fresh claims: n states and alarm entries written in one call.
		f.Clock.Advance(61 * time.Second)
		first := f.ClaimAll(t, deadline.ClaimOptions{Batch: n})
		require.Len(t, first.Claims, n)
		require.False(t, first.NextAlarm.Before(f.Clock.Now()), "nothing due left")

		// The record's lease runs out unsettled: its n claims are handed out again by one call.
		f.Clock.Advance(31 * time.Second)
		again := f.ClaimAll(t, deadline.ClaimOptions{Batch: n})
		require.Len(t, again.Claims, n)
		require.False(t, again.Claims[0].Fresh)

		// Every incident acts again now: n due alarm entries leased by one call.
		acks := make([]deadline.Ack, n)
		for i, cl := range again.Claims {
			acks[i] = reschedule(cl, sentOnce(cl), f.Clock.Now())
		}
		_, err = f.Store.Settle(ctx, acks, deadline.RecordsOf(again.Claims))
		require.NoError(t, err)
		due := f.ClaimAll(t, deadline.ClaimOptions{Batch: n})
		require.Len(t, due.Claims, n)
		require.Equal(t, 1, due.Claims[n-1].State.Next)

		// All n devices signal again in one untyped refresh: n recovery probes in one call.
		f.Clock.Advance(31 * time.Second)
		f.Refresh(t, fleet(n, "d", f.Clock.Now(), untyped)...)
		recovering := f.ClaimAll(t, deadline.ClaimOptions{Batch: n})
		require.Len(t, recovering.Claims, n, "every probe made its incident due")

		// One typed refresh of n new devices: its ZADD adds every one, so one probe call lists n devices.
		f.Refresh(t, fleet(n, "t", f.Clock.Now(), func(int) string { return "gateway" })...)
	})
}
