package deadline_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// TestRegisterExpectsOnlyDevicesRedisDoesNotKnow: an import expects the devices Redis knows nothing of
// (their deadline one timeout after the registration), also past the 500 devices one step of the script
// takes per slot; a device with a deadline keeps it, and an interrupted one stays interrupted.
func TestRegisterExpectsOnlyDevicesRedisDoesNotKnow(t *testing.T) {
	eachFixture(t, 4, func(t *testing.T, f fixture) {
		ctx := t.Context()
		t0 := f.Clock.Now()
		f.Refresh(t, deadline.Signal{Device: "known", Type: "gateway", Seen: t0}, deadline.Signal{Device: "down", Type: "gateway", Seen: t0})
		f.Clock.Advance(31 * time.Second)
		f.Refresh(t, deadline.Signal{Device: "known", Type: "gateway", Seen: f.Clock.Now()})
		require.Len(t, f.ClaimAll(t, deadline.ClaimOptions{Lease: time.Minute}).Claims, 1)
		knownBefore, _ := f.device(t, "known")

		ids := append(testenv.DeviceIDs("new", 2500), "known", "down")
		regs := make([]deadline.Registration, len(ids))
		for i := range regs {
			regs[i] = deadline.Registration{Type: "gateway"}
		}
		added, refused, err := f.Store.Register(ctx, ids, regs, make([]string, len(ids)))
		require.Empty(t, refused)
		require.NoError(t, err)
		require.Equal(t, 2500, added)
		for _, id := range ids[:2500] {
			d, found := f.device(t, id)
			require.True(t, found, id)
			require.Equal(t, f.Clock.Now().Add(30*time.Second), d.Deadline, id)
		}
		known, _ := f.device(t, "known")
		require.Equal(t, knownBefore.Deadline, known.Deadline)
		down, _ := f.device(t, "down")
		require.NotNil(t, down.Incident, "still interrupted")
		_, err = f.RDB.ZScore(ctx, f.Store.Keys().Deadlines(deadline.Slot("down", 4)), "down").Result()
		require.ErrorIs(t, err, redis.Nil, "an interrupted device is not expected anew")
	})
}
