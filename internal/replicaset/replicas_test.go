package replicaset_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/replicaset"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// TestMain stops the Redis Cluster the tests share (see testenv.RedisBackends).
func TestMain(m *testing.M) { testenv.Main(m) }

// TestReplicasShareSlotsByLease: a replica that joins sees itself and the others still beating; one
// silent too long drops out, one that leaves is gone at once. A slot leased by one replica is not the
// other's until released, and each answer is the slot's own even in one pipeline.
func TestReplicasShareSlotsByLease(t *testing.T) {
	testenv.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := t.Context()
		set := replicaset.New(rdb, "")
		t0 := time.UnixMilli(1_795_340_000_000)
		_, err := set.Join(ctx, "a", t0, 10*time.Second)
		require.NoError(t, err)
		live, err := set.Join(ctx, "b", t0.Add(5*time.Second), 10*time.Second)
		require.NoError(t, err)
		require.Equal(t, []string{"a", "b"}, live.Replicas)
		require.Equal(t, t0.Add(10*time.Second), live.NextLapse, "a drops out 10 s after its mark")
		live, err = set.Join(ctx, "c", t0.Add(11*time.Second), 10*time.Second)
		require.NoError(t, err)
		require.Equal(t, []string{"b", "c"}, live.Replicas, "a was silent for longer than 10 s")
		require.Equal(t, t0.Add(15*time.Second), live.NextLapse, "b's lapse, not c's own")
		require.NoError(t, set.Leave(ctx, "b"))
		live, err = set.Join(ctx, "c", t0.Add(12*time.Second), 10*time.Second)
		require.NoError(t, err)
		require.Equal(t, []string{"c"}, live.Replicas)
		require.True(t, live.NextLapse.IsZero(), "no other replica to lapse")

		held, err := set.LeaseSlots(ctx, "b", []int{0, 1}, nil, time.Minute)
		require.NoError(t, err)
		require.Equal(t, []bool{true, true}, held)
		held, err = set.LeaseSlots(ctx, "c", []int{1, 2}, nil, time.Minute)
		require.NoError(t, err)
		require.Equal(t, []bool{false, true}, held, "slot 1 is b's")
		_, err = set.LeaseSlots(ctx, "b", nil, []int{1}, 0)
		require.NoError(t, err)
		held, err = set.LeaseSlots(ctx, "c", []int{1, 2}, nil, time.Minute)
		require.NoError(t, err)
		require.Equal(t, []bool{true, true}, held, "released by b, renewed by c")
	})
}
