package ingest

import (
	"context"
	"sync"
	"time"
)

// Partitions in step: the partition readers of one source hand their chunks over roughly in record-time
// order. Readers that drift apart interleave signals hundreds of milliseconds apart, and a deadline
// written out of time order lands inside its slot's sorted set instead of at its end: a backlog drained
// through four partitions cost Redis 1.5× what one partition did (docs/benchmarks.md).
const (
	// alignSlack: a chunk may start this much later than another partition stands.
	alignSlack = time.Millisecond
	// alignBand: a partition further behind than this holds an older stream (a replay, a producer with
	// another clock), not drift, and nobody waits for it.
	alignBand = time.Second
	// alignMaxWait bounds one chunk's wait, so a partition whose fetch is slow costs the others little.
	alignMaxWait = 20 * time.Millisecond
)

// aligner keeps a source's partition readers in step by record time.
type aligner struct {
	maxWait time.Duration

	mu      sync.Mutex
	parts   map[topicPartition]partitionPosition
	changed chan struct{} // closed and replaced whenever a position moves
}

// partitionPosition is where a partition reader stands in record time.
type partitionPosition struct {
	// placed: it handed over a chunk or holds one to hand over; until then it is starting, and the others
	// wait for its first fetch.
	placed  bool
	handed  time.Time // record time of the last message it handed over
	pending time.Time // record time of the chunk it waits to hand over; zero while it fetches
	// caughtUp: its last fetch reached the partition's end, so nothing older waits in it.
	caughtUp bool
}

func newAligner(maxWait time.Duration) *aligner {
	return &aligner{maxWait: maxWait, parts: map[topicPartition]partitionPosition{}, changed: make(chan struct{})}
}

// join registers tp's reader before its first fetch.
func (a *aligner) join(tp topicPartition) {
	a.mu.Lock()
	a.parts[tp] = partitionPosition{}
	a.moveLocked()
	a.mu.Unlock()
}

// wait holds tp's chunk starting at record time at while another partition, starting or still catching
// up, stands more than alignSlack (and less than alignBand) behind it, for at most maxWait.
func (a *aligner) wait(ctx context.Context, tp topicPartition, at time.Time) {
	var expired <-chan time.Time
	for {
		a.mu.Lock()
		pos := a.parts[tp]
		pos.placed, pos.pending = true, at
		a.parts[tp] = pos
		behind := a.behindLocked(tp, at)
		changed := a.changed
		a.mu.Unlock()
		if !behind {
			return
		}
		if expired == nil {
			t := time.NewTimer(a.maxWait)
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-changed:
		case <-expired:
			return
		case <-ctx.Done():
			return
		}
	}
}

// behindLocked reports whether a partition other than tp is starting, or still catching up and in the
// band behind at.
func (a *aligner) behindLocked(tp topicPartition, at time.Time) bool {
	for p, pos := range a.parts {
		switch {
		case p == tp || pos.caughtUp:
		case !pos.placed:
			return true
		default:
			stands := pos.pending
			if stands.IsZero() {
				stands = pos.handed
			}
			// A zero time is a record without one: no position to wait for.
			if lag := at.Sub(stands); !stands.IsZero() && lag > alignSlack && lag < alignBand {
				return true
			}
		}
	}
	return false
}

// handed records tp's chunk handed over, its last record at record time last; atEnd: it was the last the
// partition held.
func (a *aligner) handed(tp topicPartition, last time.Time, atEnd bool) {
	a.mu.Lock()
	a.parts[tp] = partitionPosition{placed: true, handed: last, caughtUp: atEnd}
	a.moveLocked()
	a.mu.Unlock()
}

// caughtUp records a fetch of tp that found nothing past its end.
func (a *aligner) caughtUp(tp topicPartition) {
	a.mu.Lock()
	pos := a.parts[tp]
	pos.placed, pos.caughtUp = true, true
	a.parts[tp] = pos
	a.moveLocked()
	a.mu.Unlock()
}

// leave forgets tp: its reader stopped.
func (a *aligner) leave(tp topicPartition) {
	a.mu.Lock()
	delete(a.parts, tp)
	a.moveLocked()
	a.mu.Unlock()
}

func (a *aligner) moveLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
}
