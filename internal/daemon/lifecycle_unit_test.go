package daemon

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

// recorder notes the order in which stages return.
type recorder struct {
	mu      sync.Mutex
	stopped []string
}

func (r *recorder) stage(name string) func(context.Context) error {
	return func(ctx context.Context) error {
		<-ctx.Done()
		r.mu.Lock()
		r.stopped = append(r.stopped, name)
		r.mu.Unlock()
		return nil
	}
}

func TestLifecycleStopsInReverseOrder(t *testing.T) {
	defer goleak.VerifyNone(t)
	rec := &recorder{}
	var closed []string
	lc := &lifecycle{log: zap.NewNop()}
	lc.onClose("clients", func() error { closed = append(closed, "clients"); return nil })
	lc.onClose("http", func() error { closed = append(closed, "http"); return nil })
	for _, name := range []string{"scanner", "chain", "ingest"} {
		lc.add(name, rec.stage(name))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, lc.run(ctx, time.Second))
	require.Equal(t, []string{"ingest", "chain", "scanner"}, rec.stopped, "producers of work stop before what they feed")
	require.Equal(t, []string{"http", "clients"}, closed)
}

func TestLifecycleFailureStopsTheRest(t *testing.T) {
	defer goleak.VerifyNone(t)
	rec := &recorder{}
	lc := &lifecycle{log: zap.NewNop()}
	lc.add("scanner", rec.stage("scanner"))
	lc.add("ingest", func(context.Context) error { return errors.New("broker refused the credentials") })
	err := lc.run(context.Background(), time.Second)
	require.ErrorContains(t, err, "ingest failed")
	require.ErrorContains(t, err, "broker refused the credentials")
	require.Equal(t, []string{"scanner"}, rec.stopped)
}

// TestLifecycleStuckStage: one stage ignoring its cancellation must not take the others down with it: they
// are still stopped and not reported, the error names only the stuck one, and run returns within the
// timeout.
func TestLifecycleStuckStage(t *testing.T) {
	release := make(chan struct{})
	defer goleak.VerifyNone(t)
	defer close(release) // the stuck stage ends with the test, so goleak sees nothing of it
	rec := &recorder{}
	lc := &lifecycle{log: zap.NewNop()}
	lc.add("scanner", rec.stage("scanner"))
	lc.add("chain", rec.stage("chain"))
	lc.add("ingest", func(context.Context) error { <-release; return nil })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	const timeout = time.Second
	start := time.Now()
	err := lc.run(ctx, timeout)
	took := time.Since(start)
	require.EqualError(t, err, "ingest did not stop within the shutdown timeout")
	require.ElementsMatch(t, []string{"chain", "scanner"}, rec.stopped)
	// Bounded, not fast: a generous margin for a loaded machine, far below "waits for the stuck stage".
	require.Less(t, took, 3*timeout, "run must not wait for the stuck stage")
}
