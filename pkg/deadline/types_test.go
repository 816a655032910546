package deadline_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/pkg/config"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
)

func TestTypeRegistryIsSharedBetweenStores(t *testing.T) {
	eachBackend(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		f.refresh(t, deadline.Signal{Device: "x", Type: "brand-new-type", Seen: f.clock.Now()})
		other, err := deadline.New(f.rdb, deadline.Options{Slots: 8, Now: f.clock.Now, Timeout: timeoutOf})
		require.NoError(t, err)
		d, _, err := other.Device(ctx, "x")
		require.NoError(t, err)
		require.Equal(t, "brand-new-type", d.Type, "a replica that never saw the name resolves it from Redis")
	})
}

// Config validates the type count without Redis (check-config) and cannot import this package: its copy of
// the limit must be the score's.
func TestConfigKnowsTheScoresTypeLimit(t *testing.T) {
	require.Equal(t, deadline.MaxTypes, config.MaxTypes)
}

func TestLoadRefusesMoreTypesThanFitInAScore(t *testing.T) {
	// Refused before Redis is asked anything: nothing listens there.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := deadline.New(rdb, deadline.Options{Slots: 8, Timeout: timeoutOf})
	require.NoError(t, err)
	names := make([]string, deadline.MaxTypes+1)
	for i := range names {
		names[i] = fmt.Sprint("type-", i)
	}
	require.ErrorContains(t, store.Load(context.Background(), names...), "1025 types: at most 1024 fit in a deadline score")
}
