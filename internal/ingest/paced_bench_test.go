package ingest_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// writes counts the deadline writes (batches) a chain sends and the signals they carry.
type writes struct {
	next           ingest.Refresher
	calls, signals atomic.Int64
}

func (w *writes) Refresh(ctx context.Context, sigs []deadline.Signal) error {
	w.calls.Add(1)
	w.signals.Add(int64(len(sigs)))
	return w.next.Refresh(ctx, sigs)
}

// BenchmarkChainPaced: signals submitted at a steady pace (a millisecond's worth at a time) into a chain
// writing to a real Redis, for HB_BENCH_PACED_SECONDS (default 3) per rate: how long each waited from
// Submit until it was stored and acknowledged (p50/p99 ms), and how many signals a deadline write carried.
// The low rate shows what batching costs a quiet fleet, the high one what a steady load's writes carry.
func BenchmarkChainPaced(b *testing.B) {
	secs := benchrig.SizeFromEnv("HB_BENCH_PACED_SECONDS", 3)
	store := policyStore(b, testenv.StartRedis(b).Client(b))
	for _, rate := range []int{100, benchrig.SizeFromEnv("HB_BENCH_PACED_RATE", 300_000)} {
		b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) {
			n := rate * secs
			ids := devices("paced", n)
			for b.Loop() {
				lat, perWrite := pacedRun(b, store, ids, rate)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
				b.ReportMetric(perWrite, "signals/write")
			}
		})
	}
}

// pacedRun submits one signal per id at rate signals/s and returns each one's Submit → acknowledgement
// time, sorted, and the signals per deadline write.
func pacedRun(b *testing.B, store *deadline.Store, ids []string, rate int) ([]time.Duration, float64) {
	b.Helper()
	w := &writes{next: store}
	chain, stop := runChain(b, w)
	defer stop()
	lat := make([]time.Duration, len(ids))
	var acked atomic.Int64
	done := make(chan struct{})
	perTick := max(rate/1000, 1)
	start := time.Now()
	for i, id := range ids {
		if i%perTick == 0 {
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))))
		}
		sent := time.Now()
		ack := func() {
			lat[i] = time.Since(sent)
			if acked.Add(1) == int64(len(ids)) {
				close(done)
			}
		}
		m := ingest.Message{Source: ingest.SourceKafka, Device: id, Payload: []byte(`{"type":"gateway"}`), Received: sent, Ack: ack}
		require.NoError(b, chain.Submit(context.Background(), m))
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatalf("acknowledged %d of %d", acked.Load(), len(ids))
	}
	slices.Sort(lat)
	return lat, float64(w.signals.Load()) / float64(max(w.calls.Load(), 1))
}
