package overrides_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/overrides"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// TestMain stops the Redis Cluster the tests share (see testenv.RedisBackends).
func TestMain(m *testing.M) { testenv.Main(m) }

// TestTableFollowsTheVersionAndIsWrittenBackAfterALoss: a replica sees another's change once the version
// moved, registering each name once; after Redis lost the table, the replica's copy is written back
// (after the hook that restores the type registry), without undoing a device written since the loss.
func TestTableFollowsTheVersionAndIsWrittenBackAfterALoss(t *testing.T) {
	testenv.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := t.Context()
		writer, reader := overrides.New(rdb, ""), overrides.New(rdb, "")
		var allowed []string
		restored := 0
		hooks := overrides.Hooks{
			CheckLost:     func(context.Context) error { reader.MarkLost(); return nil },
			BeforeRestore: func(context.Context) error { restored++; return nil },
			Allow:         func(_ context.Context, name string) error { allowed = append(allowed, name); return nil },
		}
		require.NoError(t, reader.Sync(ctx, hooks))
		require.Empty(t, reader.Current())

		pipe := rdb.Pipeline()
		writer.QueueSet(ctx, pipe, "a", "gateway@90000")
		writer.QueueSet(ctx, pipe, "b", "gateway@90000")
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
		require.NoError(t, reader.Sync(ctx, hooks))
		require.Empty(t, reader.Current(), "the version did not move: nothing is read")
		require.NoError(t, writer.Changed(ctx))
		require.NoError(t, reader.Sync(ctx, hooks))
		require.Equal(t, map[string]string{"a": "gateway@90000", "b": "gateway@90000"}, reader.Current())
		require.Equal(t, []string{"gateway@90000"}, allowed, "one registration per name")

		require.NoError(t, rdb.FlushAll(ctx).Err()) // Redis lost the table and its version
		pipe = rdb.Pipeline()
		writer.QueueSet(ctx, pipe, "b", "sensor@5000") // written since the loss
		_, err = pipe.Exec(ctx)
		require.NoError(t, err)
		require.NoError(t, reader.Sync(ctx, hooks))
		require.Equal(t, 1, restored)
		require.Equal(t, map[string]string{"a": "gateway@90000", "b": "sensor@5000"}, reader.Current())
		require.Equal(t, map[string]string{"a": "gateway@90000", "b": "sensor@5000"}, rdb.HGetAll(ctx, "hb:overrides").Val())
	})
}
