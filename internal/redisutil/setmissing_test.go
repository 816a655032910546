package redisutil_test

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/redisutil"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// TestMain stops the Redis Cluster the tests share (see testenv.RedisBackends).
func TestMain(m *testing.M) { testenv.Main(m) }

// TestSetMissingWritesOnlyWhatTheHashLacks: a write-back larger than one script call writes every field
// the hash lacks and leaves the ones written since as they are.
func TestSetMissingWritesOnlyWhatTheHashLacks(t *testing.T) {
	testenv.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := t.Context()
		const key = "hb:setmissing"
		require.NoError(t, rdb.HSet(ctx, key, "f7", "newer", "f2500", "newer").Err())
		var pairs []any
		for i := range 2600 {
			pairs = append(pairs, fmt.Sprintf("f%d", i), "restored")
		}
		n, err := redisutil.SetMissing(ctx, rdb, key, pairs)
		require.NoError(t, err)
		require.Equal(t, int64(2598), n)
		all, err := rdb.HGetAll(ctx, key).Result()
		require.NoError(t, err)
		require.Len(t, all, 2600)
		require.Equal(t, "newer", all["f7"])
		require.Equal(t, "newer", all["f2500"], "in the third call")
		require.Equal(t, "restored", all["f2599"])
	})
}
