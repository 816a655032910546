package ingest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	partA = topicPartition{"signals", 0}
	partB = topicPartition{"signals", 1}
)

// waitAsync runs a.wait in the background; the channel closes when it returns.
func waitAsync(a *aligner, tp topicPartition, at time.Time) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.wait(context.Background(), tp, at)
	}()
	return done
}

func returned(done chan struct{}) func() bool {
	return func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
}

// TestAlignerHoldsAChunkAheadOfAPartitionCatchingUp: a chunk waits while another partition that still has
// a backlog stands behind it, and goes once that partition has caught up with it in record time.
func TestAlignerHoldsAChunkAheadOfAPartitionCatchingUp(t *testing.T) {
	a := newAligner(time.Minute, time.Minute)
	base := time.Now()
	a.join(partA)
	a.join(partB)
	a.handed(partB, base, false)
	done := waitAsync(a, partA, base.Add(100*time.Millisecond))
	require.Never(t, returned(done), 50*time.Millisecond, time.Millisecond, "B stands 100ms behind")
	a.handed(partB, base.Add(50*time.Millisecond), false)
	require.Never(t, returned(done), 50*time.Millisecond, time.Millisecond, "B still stands 50ms behind")
	a.handed(partB, base.Add(100*time.Millisecond), false)
	require.Eventually(t, returned(done), 5*time.Second, time.Millisecond)
}

// TestAlignerWaitsForAStartingPartition: a partition that has not fetched yet holds the others until its
// first chunk places it, so the reader that connects first does not run ahead.
func TestAlignerWaitsForAStartingPartition(t *testing.T) {
	a := newAligner(time.Minute, time.Minute)
	base := time.Now()
	a.join(partA)
	a.join(partB)
	done := waitAsync(a, partA, base.Add(10*time.Millisecond))
	require.Never(t, returned(done), 50*time.Millisecond, time.Millisecond, "B has not fetched")
	b := waitAsync(a, partB, base)
	require.Eventually(t, returned(b), 5*time.Second, time.Millisecond, "B is the oldest: it never waits")
	a.handed(partB, base.Add(10*time.Millisecond), false)
	require.Eventually(t, returned(done), 5*time.Second, time.Millisecond)
}

// TestAlignerIgnoresPartitionsCaughtUpOrFarBehind: a partition with nothing left to read, or standing
// further back than the band (an older stream, not drift), holds nobody.
func TestAlignerIgnoresPartitionsCaughtUpOrFarBehind(t *testing.T) {
	base := time.Now()
	for name, place := range map[string]func(a *aligner){
		"caught up":     func(a *aligner) { a.handed(partB, base, false); a.caughtUp(partB) },
		"at its end":    func(a *aligner) { a.handed(partB, base, true) },
		"far behind":    func(a *aligner) { a.handed(partB, base.Add(-time.Hour), false) },
		"no timestamps": func(a *aligner) { a.handed(partB, time.Time{}, false) },
		"left":          func(a *aligner) { a.leave(partB) },
	} {
		t.Run(name, func(t *testing.T) {
			a := newAligner(time.Minute, time.Minute)
			a.join(partA)
			a.join(partB)
			place(a)
			require.Eventually(t, returned(waitAsync(a, partA, base.Add(100*time.Millisecond))), 5*time.Second, time.Millisecond)
		})
	}
}

// TestAlignerWaitIsBounded: a partition that never moves (its fetch hangs) delays a chunk by at most
// the aligner's bound, and a reader leaving releases the chunks waiting for it at once.
func TestAlignerWaitIsBounded(t *testing.T) {
	base := time.Now()
	a := newAligner(30*time.Millisecond, time.Minute)
	a.join(partA)
	a.join(partB)
	a.handed(partB, base, false)
	start := time.Now()
	a.wait(context.Background(), partA, base.Add(100*time.Millisecond))
	require.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)

	a = newAligner(time.Minute, time.Minute)
	a.join(partA)
	a.join(partB)
	a.handed(partB, base, false)
	done := waitAsync(a, partA, base.Add(100*time.Millisecond))
	require.Never(t, returned(done), 50*time.Millisecond, time.Millisecond)
	a.leave(partB)
	require.Eventually(t, returned(done), 5*time.Second, time.Millisecond)
}

// TestAlignerStopsWaitingForAStalledPartition: a partition that has not moved for the stall time (its
// fetch hangs on its leader) holds nobody any more, however long a chunk may wait otherwise.
func TestAlignerStopsWaitingForAStalledPartition(t *testing.T) {
	base := time.Now()
	a := newAligner(time.Minute, 50*time.Millisecond)
	a.join(partA)
	a.join(partB)
	a.handed(partB, base, false)
	start := time.Now()
	done := waitAsync(a, partA, base.Add(100*time.Millisecond))
	require.Eventually(t, returned(done), 5*time.Second, time.Millisecond)
	require.GreaterOrEqual(t, time.Since(start), 40*time.Millisecond, "B was waited for until it stalled")
	require.Eventually(t, returned(waitAsync(a, partA, base.Add(200*time.Millisecond))), 5*time.Second, time.Millisecond,
		"the next chunk does not wait for B either")
}
