package ingest_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
)

// TestChainReportsRefusedWrites: a Redis that answers but refuses writes is visible (readiness reads it)
// for as long as the chain retries, and clears once a write succeeds.
func TestChainReportsRefusedWrites(t *testing.T) {
	ref := &fakeRefresher{}
	ref.fail.Store(true)
	f := startChain(t, ref, ingest.ChainOptions{})
	require.Nil(t, f.chain.WriteFailure())
	f.submit(t, 0, ingest.Message{Device: "d"})
	require.Eventually(t, func() bool { return f.chain.WriteFailure() != nil }, 5*time.Second, time.Millisecond)
	require.Zero(t, f.acks.n(), "nothing acknowledged that was not stored")
	ref.fail.Store(false)
	require.Eventually(t, func() bool { return f.acks.n() == 1 }, 10*time.Second, time.Millisecond)
	require.Nil(t, f.chain.WriteFailure())
}

// TestChainReportsRefusedWritesUntilTheLastIsStored: while one batch is still being retried, another
// batch stored does not end the failure: the hold-back reads it to keep claims from overtaking the
// signals still waiting (a false storm after a short Redis outage).
func TestChainReportsRefusedWritesUntilTheLastIsStored(t *testing.T) {
	ref := &fakeRefresher{}
	ref.failDevice.Store("waiting")
	f := startChain(t, ref, ingest.ChainOptions{Batch: 1})
	f.submit(t, 0, ingest.Message{Device: "waiting"})
	require.Eventually(t, func() bool { return f.chain.WriteFailure() != nil }, 5*time.Second, time.Millisecond)
	since := f.chain.WriteFailure().Since
	f.submit(t, 1, ingest.Message{Device: "stored"})
	require.Eventually(t, func() bool { return len(ref.signals()) > 0 }, 5*time.Second, time.Millisecond)
	require.NotNil(t, f.chain.WriteFailure(), "a batch is still being retried")
	require.Equal(t, since, f.chain.WriteFailure().Since)
	ref.failDevice.Store("")
	require.Eventually(t, func() bool { return f.chain.WriteFailure() == nil }, 10*time.Second, time.Millisecond)
}

// TestChainReportsWritesUnansweredDuringAFailure: a batch still waiting for its answer when another
// batch's write fails (a client retrying its dial) is as unknown as the failed one. The failure runs from
// its dispatch and lasts until it is written, even after the failed batch is stored.
func TestChainReportsWritesUnansweredDuringAFailure(t *testing.T) {
	ref := &fakeRefresher{slowRelease: make(chan struct{})}
	ref.slowDevice.Store("unanswered")
	f := startChain(t, ref, ingest.ChainOptions{Batch: 1, StuckWrite: time.Hour})
	before := time.Now()
	f.submit(t, 0, ingest.Message{Device: "unanswered"})
	require.Eventually(t, func() bool { return ref.calls.Load() == 1 }, 5*time.Second, time.Millisecond)
	require.Nil(t, f.chain.WriteFailure(), "a write waiting is not yet a failure")

	ref.failDevice.Store("refused")
	refusedAt := time.Now()
	f.submit(t, 1, ingest.Message{Device: "refused"})
	require.Eventually(t, func() bool { return f.chain.WriteFailure() != nil }, 5*time.Second, time.Millisecond)
	since := f.chain.WriteFailure().Since
	require.True(t, !since.Before(before) && since.Before(refusedAt), "the failure runs from the unanswered batch's dispatch, not the refused one's: %v not in [%v, %v)", since, before, refusedAt)

	ref.failDevice.Store("")
	require.Eventually(t, func() bool {
		return slices.ContainsFunc(ref.signals(), func(s deadline.Signal) bool { return s.Device == "refused" })
	}, 10*time.Second, time.Millisecond)
	require.NotNil(t, f.chain.WriteFailure(), "the refused batch is stored, the unanswered one is not")
	require.Equal(t, since, f.chain.WriteFailure().Since)

	close(ref.slowRelease)
	require.Eventually(t, func() bool { return f.chain.WriteFailure() == nil }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return f.acks.n() == 2 }, 5*time.Second, time.Millisecond)
}

// TestChainRemembersAWriteTroubleOnceOver: a stuck write leaves the span of its trouble behind once
// written (the hold-back may have been waiting on the same frozen Redis and seen none of it); a write
// answered in time leaves it as it is, and a refused one soon after (within StuckWrite) extends it.
func TestChainRemembersAWriteTroubleOnceOver(t *testing.T) {
	ref := &fakeRefresher{slowRelease: make(chan struct{})}
	ref.slowDevice.Store("stuck")
	// StuckWrite is long beside the few milliseconds between the writes below, so the refused one
	// follows the stuck one within it.
	const stuckWrite = 300 * time.Millisecond
	f := startChain(t, ref, ingest.ChainOptions{Batch: 1, StuckWrite: stuckWrite})
	require.Zero(t, f.chain.LastWriteTrouble())
	before := time.Now()
	f.submit(t, 0, ingest.Message{Device: "stuck"})
	require.Eventually(t, func() bool { return ref.calls.Load() == 1 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return f.chain.WriteFailure() != nil }, 5*time.Second, time.Millisecond)
	require.Zero(t, f.chain.LastWriteTrouble(), "not over yet")
	close(ref.slowRelease)
	require.Eventually(t, func() bool { return f.acks.n() == 1 }, 5*time.Second, time.Millisecond)
	stuck := f.chain.LastWriteTrouble()
	require.False(t, stuck.From.Before(before))
	require.GreaterOrEqual(t, stuck.To.Sub(stuck.From), stuckWrite)

	f.submit(t, 1, ingest.Message{Device: "in-time"})
	require.Eventually(t, func() bool { return f.acks.n() == 2 }, 5*time.Second, time.Millisecond)
	require.Equal(t, stuck, f.chain.LastWriteTrouble(), "a write answered in time is no trouble")

	ref.failDevice.Store("refused")
	f.submit(t, 2, ingest.Message{Device: "refused"})
	require.Eventually(t, func() bool { return f.chain.WriteFailure() != nil }, 5*time.Second, time.Millisecond)
	ref.failDevice.Store("")
	require.Eventually(t, func() bool { return f.acks.n() == 3 }, 10*time.Second, time.Millisecond)
	refused := f.chain.LastWriteTrouble()
	require.True(t, refused.To.After(stuck.To))
	require.Equal(t, stuck.From, refused.From, "one soon after the other extends the span")
}

// TestChainReportsAStuckWrite: a write unanswered for longer than StuckWrite counts as refused from its
// dispatch (a network that drops packets answers nothing for seconds), and ends when it is written.
func TestChainReportsAStuckWrite(t *testing.T) {
	ref := &fakeRefresher{slowRelease: make(chan struct{})}
	ref.slowDevice.Store("stuck")
	f := startChain(t, ref, ingest.ChainOptions{Batch: 1, StuckWrite: 50 * time.Millisecond})
	before := time.Now()
	f.submit(t, 0, ingest.Message{Device: "stuck"})
	require.Eventually(t, func() bool { return ref.calls.Load() == 1 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return f.chain.WriteFailure() != nil }, 5*time.Second, time.Millisecond)
	failure := f.chain.WriteFailure()
	require.False(t, failure.Since.Before(before))
	require.GreaterOrEqual(t, time.Since(failure.Since), 50*time.Millisecond)
	require.ErrorContains(t, failure.Err, "not been answered")
	close(ref.slowRelease)
	require.Eventually(t, func() bool { return f.chain.WriteFailure() == nil }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return f.acks.n() == 1 }, 5*time.Second, time.Millisecond)
}
