package ingest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/ingest"
)

// TestChainBatchesASteadyStreamLikeABacklog: a signal arriving while nothing is being written goes out
// at once, however long the linger; the signals of a stream arriving while that write is in flight do
// not go out a few at a time as soon as it returns, but together once the batch is full, as a backlog's.
func TestChainBatchesASteadyStreamLikeABacklog(t *testing.T) {
	const batch = 64
	ref := &fakeRefresher{hold: make(chan chan struct{})}
	f := startChain(t, ref, ingest.ChainOptions{Batch: batch, Linger: time.Hour})
	sig := func(i int) { f.submit(t, i, ingest.Message{Key: fmt.Appendf(nil, "dev-%d", i)}) }
	sig(0)
	var first chan struct{}
	select {
	case first = <-ref.hold:
	case <-time.After(10 * time.Second):
		t.Fatal("a lone signal waited for the linger")
	}
	for i := 1; i <= 10; i++ {
		sig(i)
	}
	require.Eventually(t, func() bool { return f.chain.Queued() == 0 }, 5*time.Second, time.Millisecond)
	close(first)
	require.Eventually(t, func() bool { return f.acks.n() == 1 }, 5*time.Second, time.Millisecond)
	f.releaseLaterWrites()
	for i := 11; i <= batch; i++ {
		sig(i)
	}
	require.Eventually(t, func() bool { return f.acks.n() == 1+batch }, 5*time.Second, time.Millisecond)
	ref.mu.Lock()
	defer ref.mu.Unlock()
	sizes := make([]int, len(ref.batches))
	for i, b := range ref.batches {
		sizes[i] = len(b)
	}
	require.Equal(t, []int{1, batch}, sizes, "signals per deadline write")
}

// TestChainDoesNotHoldAPausedStream: MQTT signals that arrived during a write and then stop coming (a
// broker waiting for its in-flight window's acknowledgements) go out once the write returned, not after
// the linger.
func TestChainDoesNotHoldAPausedStream(t *testing.T) {
	ref := &fakeRefresher{hold: make(chan chan struct{})}
	f := startChain(t, ref, ingest.ChainOptions{Linger: time.Minute})
	mqtt := func(i int) ingest.Message {
		return ingest.Message{Source: ingest.SourceMQTT, Key: fmt.Appendf(nil, "dev-%d", i)}
	}
	f.submit(t, 0, mqtt(0))
	first := <-ref.hold
	for i := 1; i <= 10; i++ {
		f.submit(t, i, mqtt(i))
	}
	require.Eventually(t, func() bool { return f.chain.Queued() == 0 }, 5*time.Second, time.Millisecond)
	close(first)
	select {
	case r := <-ref.hold:
		close(r)
	case <-time.After(30 * time.Second):
		t.Fatal("the paused stream's batch waited for the linger")
	}
	require.Eventually(t, func() bool { return f.acks.n() == 11 }, 5*time.Second, time.Millisecond)
}

// TestChainBatchesAKafkaStreamAcrossItsPauses: Kafka signals come a fetch at a time. Once a full batch
// went out, the signals that go on from it, with nothing in flight and pauses between fetches, go out
// in full batches too, as a backlog's would.
func TestChainBatchesAKafkaStreamAcrossItsPauses(t *testing.T) {
	const batch, fetch = 32, 8
	ref := &fakeRefresher{hold: make(chan chan struct{})}
	f := startChain(t, ref, ingest.ChainOptions{Batch: batch, Linger: time.Hour})
	sig := func(i int) { f.submit(t, i, ingest.Message{Key: fmt.Appendf(nil, "dev-%d", i)}) }
	sig(0)
	first := <-ref.hold
	for i := 1; i <= fetch; i++ {
		sig(i)
	}
	require.Eventually(t, func() bool { return f.chain.Queued() == 0 }, 5*time.Second, time.Millisecond)
	close(first)
	f.releaseLaterWrites()
	for i := fetch + 1; i <= 2*batch; i++ {
		sig(i)
		if i%fetch == 0 { // the next fetch's round trip: the chain drains what it has
			require.Eventually(t, func() bool { return f.chain.Queued() == 0 }, 5*time.Second, time.Millisecond)
		}
	}
	require.Eventually(t, func() bool { return f.acks.n() == 1+2*batch }, 10*time.Second, time.Millisecond)
	ref.mu.Lock()
	defer ref.mu.Unlock()
	sizes := make([]int, len(ref.batches))
	for i, b := range ref.batches {
		sizes[i] = len(b)
	}
	require.Equal(t, []int{1, batch, batch}, sizes, "signals per deadline write")
}

// TestChainDoesNotHoldASlowKafkaStream: a stream far from filling a batch per linger (a fetch of two
// signals, the next one once they are stored) is written a fetch at a time, however long the linger.
func TestChainDoesNotHoldASlowKafkaStream(t *testing.T) {
	ref := &fakeRefresher{}
	f := startChain(t, ref, ingest.ChainOptions{Batch: 32, Linger: time.Hour})
	for i := 0; i < 10; i += 2 {
		f.submit(t, i, ingest.Message{Key: fmt.Appendf(nil, "dev-%d", i)})
		f.submit(t, i+1, ingest.Message{Key: fmt.Appendf(nil, "dev-%d", i+1)})
		require.Eventually(t, func() bool { return f.acks.n() == i+2 }, 10*time.Second, time.Millisecond,
			"signals %d and %d waited for the linger", i, i+1)
	}
}

// releaseLaterWrites lets every write of a chain with a holding refresher through from now on.
func (f *chainFixture) releaseLaterWrites() {
	go func() {
		for {
			select {
			case r := <-f.ref.hold:
				close(r)
			case <-f.ctx.Done():
				return
			}
		}
	}()
}
