package deadline_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

// TestRetentionForgetsTheLongSilentUnregistered: of three devices silent past the retention, the
// registered one stays, and one that signalled again stays; the other is forgotten with its links.
func TestRetentionForgetsTheLongSilentUnregistered(t *testing.T) {
	eachFixture(t, 4, func(t *testing.T, f fixture) {
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
		children, err := f.rdb.SMembers(ctx, f.store.Keys().Children("gw")).Result()
		require.NoError(t, err)
		require.Empty(t, children, "its parent no longer lists it")
		_, found = f.device(t, "kept")
		require.True(t, found, "a registered device is expected, never forgotten")
	})
}

// TestDeleteEndsAnOwnTimeoutOnEveryReplica: deleting a device with its own timeout makes the other
// replicas drop it at their next sync, so a device of that name signalling again has its type's timeout.
func TestDeleteEndsAnOwnTimeoutOnEveryReplica(t *testing.T) {
	eachFixture(t, 4, func(t *testing.T, f fixture) {
		ctx := context.Background()
		other := fixtureStore(t, f.rdb, 4, f.clock.Now, nil)
		_, err := f.store.Register(ctx, []string{"own"}, []deadline.Registration{{Type: "gateway", TimeoutMs: 6000}}, []string{""})
		require.NoError(t, err)
		require.NoError(t, other.SyncOverrides(ctx))
		seen := f.clock.Now()
		require.NoError(t, other.Refresh(ctx, []deadline.Signal{{Device: "own", Type: "gateway", Seen: seen}}))
		d, _ := f.device(t, "own")
		require.Equal(t, []any{"gateway", 6 * time.Second}, []any{d.Type, d.OwnTimeout}, "the own timeout applies on the other replica")

		found, err := f.store.Delete(ctx, "own")
		require.NoError(t, err)
		require.True(t, found)
		require.NoError(t, other.SyncOverrides(ctx))
		require.NoError(t, other.Refresh(ctx, []deadline.Signal{{Device: "own", Type: "gateway", Seen: seen}}))
		d, _ = f.device(t, "own")
		require.Equal(t, "gateway", d.Type, "deleted: the type's timeout again")
		require.Equal(t, seen.Add(30*time.Second), d.Deadline)
	})
}

// TestDeleteManyDeletesEachDevice: one call deletes every known device of the list with its links, and
// says which were not known.
func TestDeleteManyDeletesEachDevice(t *testing.T) {
	eachFixture(t, 4, func(t *testing.T, f fixture) {
		ctx := context.Background()
		t0 := f.clock.Now()
		f.refresh(t, deadline.Signal{Device: "a", Type: "gateway", Seen: t0},
			deadline.Signal{Device: "b", Type: "gateway", Parent: "gw", Seen: t0},
			deadline.Signal{Device: "kept", Type: "gateway", Seen: t0})
		found, err := f.store.DeleteMany(ctx, []string{"a", "never-seen", "b"})
		require.NoError(t, err)
		require.Equal(t, []bool{true, false, true}, found)
		for _, id := range []string{"a", "b"} {
			_, known := f.device(t, id)
			require.False(t, known, id)
		}
		_, known := f.device(t, "kept")
		require.True(t, known, "a device not named stays")
		children, err := f.rdb.SMembers(ctx, f.store.Keys().Children("gw")).Result()
		require.NoError(t, err)
		require.Empty(t, children)
	})
}
