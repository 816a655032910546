package registry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/registry"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// BenchmarkRegistryMigration times Migrate moving HB_BENCH_DEVICES registrations (1M by default) of the
// previous layout (64 hashes of JSON, as that version wrote them) into the current one: what it adds to
// the first start of a replica of this version. moved/s is its rate.
func BenchmarkRegistryMigration(b *testing.B) {
	srv := testenv.StartRedis(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	n := benchrig.SizeFromEnv("HB_BENCH_DEVICES", 1_000_000)
	for b.Loop() {
		b.StopTimer()
		require.NoError(b, rdb.FlushAll(ctx).Err())
		pipe := rdb.Pipeline()
		for i := range n {
			dev := fmt.Sprintf("device-%08d", i)
			pipe.HSet(ctx, legacyRegistryKey(dev), dev, `{"device_type":"default","registered_ms":1763800000000}`)
			if pipe.Len() == 10_000 || i == n-1 {
				_, err := pipe.Exec(ctx)
				require.NoError(b, err)
			}
		}
		reg := registry.New(rdb, "")
		began := time.Now()
		b.StartTimer()
		moved, err := reg.Migrate(ctx)
		b.StopTimer()
		require.NoError(b, err)
		require.Equal(b, n, moved)
		b.ReportMetric(float64(n)/time.Since(began).Seconds(), "moved/s")
		b.StartTimer()
	}
}
