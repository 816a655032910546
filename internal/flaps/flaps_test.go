package flaps_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/flaps"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// TestMain stops the Redis Cluster the tests share (see testenv.RedisBackends).
func TestMain(m *testing.M) { testenv.Main(m) }

// TestHistoriesAreReadAsRecordedAndPrunedByTheirNewest: a recorded history reads back oldest first,
// only where asked for; a prune drops the histories whose newest interruption is before its limit,
// whatever their older ones, and keeps the others and the other slots'.
func TestHistoriesAreReadAsRecordedAndPrunedByTheirNewest(t *testing.T) {
	testenv.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := t.Context()
		h := flaps.New(rdb, "")
		now := time.UnixMilli(1_795_340_000_000)
		ms := func(ago time.Duration) int64 { return now.Add(-ago).UnixMilli() }
		require.NoError(t, h.Record(ctx, []flaps.Update{
			{Device: "old", Slot: 1, Times: []int64{ms(3 * time.Hour), ms(2 * time.Hour)}},
			{Device: "newest-counts", Slot: 1, Times: []int64{ms(5 * time.Hour), ms(10 * time.Minute)}},
			{Device: "other-slot", Slot: 2, Times: []int64{ms(4 * time.Hour)}},
		}))
		devices := []flaps.Device{{ID: "old", Slot: 1}, {ID: "newest-counts", Slot: 1}, {ID: "other-slot", Slot: 2}, {ID: "never", Slot: 1}}
		got, err := h.History(ctx, devices, []bool{true, false, true, true})
		require.NoError(t, err)
		require.Equal(t, [][]int64{{ms(3 * time.Hour), ms(2 * time.Hour)}, nil, {ms(4 * time.Hour)}, nil}, got)

		next, pruned, err := h.Prune(ctx, 1, 0, 100, now.Add(-time.Hour))
		require.NoError(t, err)
		require.Zero(t, next, "one page holds the slot")
		require.Equal(t, 1, pruned)
		got, err = h.History(ctx, devices, []bool{true, true, true, true})
		require.NoError(t, err)
		require.Equal(t, [][]int64{nil, {ms(5 * time.Hour), ms(10 * time.Minute)}, {ms(4 * time.Hour)}, nil}, got)
	})
}
