package deadline_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

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
