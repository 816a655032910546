package deadline_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
)

// TestUntypedSignalOfARememberedDeviceReadsNothing: once a store wrote or read a device's type, the
// device's untyped signals are timed by it without asking Redis, and a store that never saw the device
// still reads it.
func TestUntypedSignalOfARememberedDeviceReadsNothing(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	f := setup(t, rdb, 8)
	f.refresh(t, deadline.Signal{Device: "gw", Type: "gateway", Seen: f.clock.Now()})
	later := func(d time.Duration) time.Time { f.clock.Advance(d); return f.clock.Now() }
	reads := func() int64 { return testenv.CommandStats(t, rdb)["zmscore"].Calls }
	before := reads()
	seen := later(time.Second)
	f.refresh(t, deadline.Signal{Device: "gw", Seen: seen})
	require.Equal(t, before, reads(), "the type was remembered, not read")
	d, _ := f.device(t, "gw")
	require.Equal(t, "gateway", d.Type)
	require.Equal(t, seen.Add(30*time.Second), d.Deadline, "timed by the gateway timeout")

	other := newStore(t, rdb, 8, f.clock.Now, nil)
	seen = later(time.Second)
	require.NoError(t, other.Refresh(context.Background(), []deadline.Signal{{Device: "gw", Seen: seen}}))
	require.Equal(t, before+1, reads(), "a store that never saw the device reads its type once")
	require.NoError(t, other.Refresh(context.Background(), []deadline.Signal{{Device: "gw", Seen: later(time.Second)}}))
	require.Equal(t, before+1, reads(), "and then remembers it")
}

// TestTypeChangedByAnotherStoreReachesTheRememberingOne: a replica that remembers a device's type learns
// of a change another replica made, and of a delete, before its next batch is timed, so an untyped
// signal neither keeps nor writes back the old type.
func TestTypeChangedByAnotherStoreReachesTheRememberingOne(t *testing.T) {
	eachBackend(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		later := func(d time.Duration) time.Time { f.clock.Advance(d); return f.clock.Now() }
		other := newStore(t, f.rdb, 8, f.clock.Now, nil)
		f.refresh(t, deadline.Signal{Device: "d", Type: "gateway", Seen: f.clock.Now()})
		f.refresh(t, deadline.Signal{Device: "d", Seen: later(time.Second)}) // remembered as a gateway

		require.NoError(t, other.Refresh(ctx, []deadline.Signal{{Device: "d", Type: "sensor", Seen: later(time.Second)}}))
		// The first batch after the change carries the log's count back; the one after applies it.
		f.refresh(t, deadline.Signal{Device: "unrelated", Seen: f.clock.Now()})
		seen := later(time.Second)
		f.refresh(t, deadline.Signal{Device: "d", Seen: seen})
		d, _ := f.device(t, "d")
		require.Equal(t, "sensor", d.Type, "the other store's change stands")
		require.Equal(t, seen.Add(10*time.Minute), d.Deadline, "timed by the sensor timeout")

		found, err := other.Delete(ctx, "d")
		require.NoError(t, err)
		require.True(t, found)
		f.refresh(t, deadline.Signal{Device: "unrelated", Seen: f.clock.Now()})
		seen = later(time.Second)
		f.refresh(t, deadline.Signal{Device: "d", Seen: seen})
		d, _ = f.device(t, "d")
		require.Equal(t, "default", d.Type, "a deleted device starts afresh with the default type")
		require.Equal(t, seen.Add(time.Minute), d.Deadline)
	})
}

// TestRememberedTypeIsReadAgainAfterItsTime: a change no log told of (Redis lost its data, an older
// replica) stands after typeMemoryRefresh at the latest.
func TestRememberedTypeIsReadAgainAfterItsTime(t *testing.T) {
	eachBackend(t, 8, func(t *testing.T, f fixture) {
		f.refresh(t, deadline.Signal{Device: "d", Type: "gateway", Seen: f.clock.Now()})
		later := func(d time.Duration) time.Time { f.clock.Advance(d); return f.clock.Now() }
		// Another writer records the sensor type without telling the log.
		score := float64(f.clock.Now().Add(10*time.Minute).UnixMilli()*deadline.MaxTypes + 2)
		require.NoError(t, f.rdb.ZAdd(context.Background(), f.store.Keys().Deadlines(deadline.Slot("d", 8)), redis.Z{Score: score, Member: "d"}).Err())
		seen := later(11 * time.Minute)
		f.refresh(t, deadline.Signal{Device: "d", Seen: seen})
		d, _ := f.device(t, "d")
		require.Equal(t, "sensor", d.Type)
		require.Equal(t, seen.Add(10*time.Minute), d.Deadline)
	})
}
