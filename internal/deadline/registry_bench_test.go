package deadline_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// BenchmarkRegistryMemory reports Redis memory per expected device (INFO memory used_memory, minus the
// empty server's) for benchDevices registered in batches of 4000 as POST /v1/devices:import writes them,
// over 64 slots, with the default hash-max-listpack-* settings:
//   - expected: registered with a type and nothing else, never signalled (the deadline and the registry);
//   - signalled: the same fleet signalled without registering (the deadline alone), for the registry's share;
//   - labelled: registered with two labels.
//
// rows/s is Store.Register's rate (the import's store side).
func BenchmarkRegistryMemory(b *testing.B) {
	srv := testenv.StartRedis(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	n := benchDevices()
	for _, c := range []struct {
		name   string
		labels map[string]string
		signal bool
	}{{"expected", nil, false}, {"signalled", nil, true}, {"labelled", map[string]string{"site": "berlin-7", "floor": "3"}, false}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				require.NoError(b, rdb.FlushAll(ctx).Err())
				store, err := deadline.New(rdb, deadline.Options{Slots: 64, Timeout: timeoutOf})
				require.NoError(b, err)
				_, err = store.SyncLayout(ctx, 64)
				require.NoError(b, err)
				before := usedMemory(b, srv)
				began := time.Now()
				b.StartTimer()
				if c.signal {
					preload(b, store, n, began, 0)
				} else {
					register(b, store, n, c.labels)
				}
				b.StopTimer()
				took := time.Since(began)
				b.ReportMetric(float64(usedMemory(b, srv)-before)/float64(n), "bytes/device")
				b.ReportMetric(float64(n)/took.Seconds(), "rows/s")
				b.StartTimer()
			}
		})
	}
}

// register registers n devices of type default in batches of 4000.
func register(b *testing.B, store *deadline.Store, n int, labels map[string]string) {
	b.Helper()
	const batch = 4000
	ids := make([]string, 0, batch)
	regs := make([]deadline.Registration, 0, batch)
	parents := make([]string, 0, batch)
	for i := range n {
		ids, regs, parents = append(ids, benchDevice(i)), append(regs, deadline.Registration{Type: "default", Labels: labels}), append(parents, "")
		if len(ids) == batch || i == n-1 {
			_, _, err := store.Register(context.Background(), ids, regs, parents)
			require.NoError(b, err)
			ids, regs, parents = ids[:0], regs[:0], parents[:0]
		}
	}
}
