package deadline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/internal/testenv/deadlinetest"
)

// BenchmarkRetime prices a reload that changes a type's timeout: each device's next signal goes through
// the retime script (retime.go), and its next one reads its recorded type again, which the store forgot.
// Each iteration changes the timeout of a fleet of gateways and times three passes of typed signals in
// batches of 256: the retimed one, the one after it, and an ordinary one, the same run's baseline.
func BenchmarkRetime(b *testing.B) {
	ctx := context.Background()
	rdb := testenv.StartRedis(b).Client(b)
	policies := &reloadable{timeouts: map[string]time.Duration{"default": time.Minute, "gateway": 600 * time.Second}}
	store := deadlinetest.NewStore(b, rdb, deadline.Options{Slots: 64, Timeout: policies.timeout}, "default", "gateway")
	const n = 256 * 40
	pass := func() time.Duration {
		start := time.Now()
		for i := 0; i < n; i += 256 {
			batch := make([]deadline.Signal, 256)
			for j := range batch {
				batch[j] = deadline.Signal{Device: fmt.Sprint("gw-", i+j), Type: "gateway", Seen: time.Now()}
			}
			require.NoError(b, store.Refresh(ctx, batch))
		}
		return time.Since(start)
	}
	pass()
	pass()
	var retimed, after, ordinary time.Duration
	b.ResetTimer()
	for i := range b.N {
		policies.set("gateway", time.Duration(300+300*(i%2))*time.Second)
		require.NoError(b, store.Load(ctx, "default", "gateway"))
		retimed += pass()
		after += pass()
		ordinary += pass()
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(n*b.N) }
	b.ReportMetric(per(retimed), "retimed-ns/signal")
	b.ReportMetric(per(after), "after-ns/signal")
	b.ReportMetric(per(ordinary), "baseline-ns/signal")
	b.ReportMetric(float64(retimed)/float64(ordinary), "x-retimed")
	b.ReportMetric(float64(after)/float64(ordinary), "x-after")
}
