package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/lease"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// TestMain stops the Redis Cluster the tests share (see testenv.RedisBackends).
func TestMain(m *testing.M) { testenv.Main(m) }

func TestTakeRenewRelease(t *testing.T) {
	testenv.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		a := lease.Lease{Key: "hb:lease", Holder: "a"}
		b := lease.Lease{Key: a.Key, Holder: "b"}

		held, err := a.Take(ctx, rdb, time.Minute)
		require.NoError(t, err)
		require.True(t, held, "a free lease is taken")
		require.Equal(t, "a", rdb.Get(ctx, a.Key).Val())

		held, err = b.Take(ctx, rdb, time.Minute)
		require.NoError(t, err)
		require.False(t, held, "a held lease is not taken by another")

		require.NoError(t, rdb.PExpire(ctx, a.Key, time.Second).Err())
		held, err = a.Take(ctx, rdb, time.Hour)
		require.NoError(t, err)
		require.True(t, held, "the holder renews")
		require.Greater(t, rdb.PTTL(ctx, a.Key).Val(), time.Minute, "a renewal runs for the new ttl")

		released, err := b.Release(ctx, rdb)
		require.NoError(t, err)
		require.False(t, released, "only the holder releases")
		require.Equal(t, "a", rdb.Get(ctx, a.Key).Val())

		released, err = a.Release(ctx, rdb)
		require.NoError(t, err)
		require.True(t, released)
		require.Zero(t, rdb.Exists(ctx, a.Key).Val(), "a release frees the key at once")

		held, err = b.Take(ctx, rdb, time.Minute)
		require.NoError(t, err)
		require.True(t, held, "a released lease is taken at once")
	})
}

// A holder that stops renewing (a dead replica) loses the lease once it lapses, and another takes it.
func TestStealAfterExpiry(t *testing.T) {
	testenv.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		dead := lease.Lease{Key: "hb:lease", Holder: "dead"}
		live := lease.Lease{Key: dead.Key, Holder: "live"}

		held, err := dead.Take(ctx, rdb, 50*time.Millisecond)
		require.NoError(t, err)
		require.True(t, held)
		held, err = live.Take(ctx, rdb, time.Minute)
		require.NoError(t, err)
		require.False(t, held)

		require.Eventually(t, func() bool {
			held, err := live.Take(ctx, rdb, time.Minute)
			require.NoError(t, err)
			return held
		}, 5*time.Second, 10*time.Millisecond, "a lapsed lease is taken by another")

		released, err := dead.Release(ctx, rdb)
		require.NoError(t, err)
		require.False(t, released, "the former holder cannot release its successor's lease")
		held, err = dead.Take(ctx, rdb, time.Minute)
		require.NoError(t, err)
		require.False(t, held, "nor take it back")
	})
}

// A ttl under a millisecond still takes the lease: its 0 ms must not read as a release.
func TestTinyTTLTakes(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	l := lease.Lease{Key: "hb:lease", Holder: "a"}
	held, err := l.Take(context.Background(), rdb, time.Microsecond)
	require.NoError(t, err)
	require.True(t, held)
}

// Many leases in one pipeline, as slot ownership renews them (replicaset.Set.LeaseSlots): each key's reply
// stands on its own.
func TestScriptInPipeline(t *testing.T) {
	testenv.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		require.NoError(t, rdb.Set(ctx, "hb:owner:{1}", "other", time.Minute).Err())
		require.NoError(t, lease.Script.Load(ctx, rdb).Err())
		pipe := rdb.Pipeline()
		take0 := lease.Script.EvalSha(ctx, pipe, []string{"hb:owner:{0}"}, lease.TakeArgs("me", time.Minute)...)
		take1 := lease.Script.EvalSha(ctx, pipe, []string{"hb:owner:{1}"}, lease.TakeArgs("me", time.Minute)...)
		release2 := lease.Script.EvalSha(ctx, pipe, []string{"hb:owner:{2}"}, lease.ReleaseArgs("me")...)
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
		for _, c := range []struct {
			cmd  *redis.Cmd
			want bool
		}{{take0, true}, {take1, false}, {release2, false}} {
			held, err := lease.Held(c.cmd)
			require.NoError(t, err)
			require.Equal(t, c.want, held, c.cmd.Args())
		}
	})
}
