package deadline_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
)

// TestStoresNoticeRedisLostTheirData: Redis comes back empty, as after a restart without persistence.
// Every store notices at its next layout read, not only the one that writes the layout anew; the type
// names go back under the indexes the scores use, a name registered afterwards takes a free index, and a
// parent link the store remembers is written again by the child's next signal.
func TestStoresNoticeRedisLostTheirData(t *testing.T) {
	eachBackend(t, 8, func(t *testing.T, f fixture) {
		ctx := t.Context()
		other := newStore(t, f.rdb, 8, f.clock.Now, nil)
		for _, s := range []*deadline.Store{f.store, other} {
			_, err := s.SyncLayout(ctx, 8)
			require.NoError(t, err)
		}
		registry := func() map[string]string {
			all, err := f.rdb.HGetAll(ctx, f.store.Keys().Types()).Result()
			require.NoError(t, err)
			return all
		}
		types := registry()
		child := deadline.Signal{Device: "child", Type: "sensor", Parent: "gw", Seen: f.clock.Now()}
		f.refresh(t, child)
		_, err := f.store.RefreshLayout(ctx)
		require.NoError(t, err)
		lost, _ := f.store.DataLost()
		require.Zero(t, lost, "a layout read of the same data is no loss")

		testenv.LoseData(t, f.rdb)
		for _, s := range []*deadline.Store{f.store, other} {
			_, err := s.RefreshLayout(ctx)
			require.NoError(t, err)
			lost, at := s.DataLost()
			require.Equal(t, int64(1), lost)
			require.True(t, at.Equal(f.clock.Now()), "noticed at %s", at)
		}
		require.Equal(t, types, registry())
		require.NoError(t, other.Load(ctx, "default", "gateway", "sensor", "meter"))
		require.Equal(t, strconv.Itoa(len(types)), registry()["meter"])

		child.Seen = f.clock.Now().Add(1)
		f.refresh(t, child)
		parents, err := f.store.ParentsOf(ctx, []string{"child"})
		require.NoError(t, err)
		require.Equal(t, []string{"gw"}, parents)
	})
}
