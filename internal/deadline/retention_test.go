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
		t0 := f.Clock.Now()
		f.Refresh(t, deadline.Signal{Device: "gone", Type: "gateway", Parent: "gw", Seen: t0},
			deadline.Signal{Device: "kept", Type: "gateway", Seen: t0}, deadline.Signal{Device: "back", Type: "gateway", Seen: t0})
		_, _, err := f.Store.Register(ctx, []string{"kept"}, []deadline.Registration{{Type: "gateway"}}, []string{""})
		require.NoError(t, err)
		f.Clock.Advance(time.Hour)
		require.Len(t, f.ClaimAll(t, deadline.ClaimOptions{Lease: time.Minute}).Claims, 3)
		f.Refresh(t, deadline.Signal{Device: "back", Type: "gateway", Seen: f.Clock.Now()})

		var forgotten []string
		for slot := range f.Store.Slots() {
			for cursor := uint64(0); ; {
				next, gone, err := f.Store.ForgetSilent(ctx, slot, cursor, 100, f.Clock.Now().Add(-30*time.Minute))
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
		parents, err := f.Store.Links().ParentsOf(ctx, []string{"gone"})
		require.NoError(t, err)
		require.Equal(t, []string{""}, parents, "its parent link went with it")
		children, err := f.RDB.SMembers(ctx, f.Store.Keys().Children("gw")).Result()
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
		other := fixtureStore(t, f.RDB, 4, f.Clock.Now, nil)
		_, _, err := f.Store.Register(ctx, []string{"own"}, []deadline.Registration{{Type: "gateway", TimeoutMs: 6000}}, []string{""})
		require.NoError(t, err)
		require.NoError(t, other.SyncOverrides(ctx))
		seen := f.Clock.Now()
		require.NoError(t, other.Refresh(ctx, []deadline.Signal{{Device: "own", Type: "gateway", Seen: seen}}))
		d, _ := f.device(t, "own")
		require.Equal(t, []any{"gateway", 6 * time.Second}, []any{d.Type, d.OwnTimeout}, "the own timeout applies on the other replica")

		found, err := f.Store.Delete(ctx, "own")
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
		t0 := f.Clock.Now()
		f.Refresh(t, deadline.Signal{Device: "a", Type: "gateway", Seen: t0},
			deadline.Signal{Device: "b", Type: "gateway", Parent: "gw", Seen: t0},
			deadline.Signal{Device: "kept", Type: "gateway", Seen: t0})
		found, err := f.Store.DeleteMany(ctx, []string{"a", "never-seen", "b"})
		require.NoError(t, err)
		require.Equal(t, []bool{true, false, true}, found)
		for _, id := range []string{"a", "b"} {
			_, known := f.device(t, id)
			require.False(t, known, id)
		}
		_, known := f.device(t, "kept")
		require.True(t, known, "a device not named stays")
		children, err := f.RDB.SMembers(ctx, f.Store.Keys().Children("gw")).Result()
		require.NoError(t, err)
		require.Empty(t, children)
	})
}
