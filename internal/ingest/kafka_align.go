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
	// alignMaxWait bounds one chunk's wait, so a partition whose fetch is slow costs the others little;
	// alignStall: a partition that has not moved for this long (a fetch hanging on its leader) is waited
	// for no more, so it cannot slow the others for longer than that.
	alignMaxWait = 20 * time.Millisecond
	alignStall   = 100 * time.Millisecond
)

// newSourceAligner makes a Kafka source's aligner; a test of the alignment itself widens its bounds, so
// that a build with the race detector, twenty times slower, is not judged by production's waits.
var newSourceAligner = func() *aligner { return newAligner(alignMaxWait, alignStall) }

// aligner keeps a source's partition readers in step by record time.
type aligner struct {
	maxWait, stall time.Duration

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
	moved    time.Time // when it last joined, took a chunk to hand over, handed one or caught up
}

func newAligner(maxWait, stall time.Duration) *aligner {
	return &aligner{maxWait: maxWait, stall: stall, parts: map[topicPartition]partitionPosition{}, changed: make(chan struct{})}
}

// join registers tp's reader before its first fetch.
func (a *aligner) join(tp topicPartition) {
	a.mu.Lock()
	a.parts[tp] = partitionPosition{moved: time.Now()}
	a.moveLocked()
	a.mu.Unlock()
}

// wait holds tp's chunk starting at record time at while another partition, starting or still catching
// up, stands more than alignSlack (and less than alignBand) behind it, for at most maxWait.
func (a *aligner) wait(ctx context.Context, tp topicPartition, at time.Time) {
	start := time.Now()
	var timer *time.Timer
	for {
		now := time.Now()
		a.mu.Lock()
		pos := a.parts[tp]
		pos.placed, pos.pending, pos.moved = true, at, now
		a.parts[tp] = pos
		stalls, behind := a.behindLocked(tp, at, now)
		changed := a.changed
		a.mu.Unlock()
		if !behind {
			return
		}
		// Wake when the partition waited for would count as stalled, if that comes before maxWait.
		wake := start.Add(a.maxWait)
		if stalls.Before(wake) {
			wake = stalls
		}
		if timer == nil {
			timer = time.NewTimer(wake.Sub(now))
			defer timer.Stop()
		} else {
			timer.Reset(wake.Sub(now))
		}
		select {
		case <-changed:
		case <-timer.C:
			if !time.Now().Before(start.Add(a.maxWait)) {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// behindLocked reports whether a partition other than tp, not stalled, is starting, or still catching
// up and in the band behind at; if so, stalls is when the first such would count as stalled.
func (a *aligner) behindLocked(tp topicPartition, at, now time.Time) (stalls time.Time, behind bool) {
	for p, pos := range a.parts {
		if p == tp || pos.caughtUp || now.Sub(pos.moved) >= a.stall {
			continue
		}
		if pos.placed {
			stands := pos.pending
			if stands.IsZero() {
				stands = pos.handed
			}
			// A zero time is a record without one: no position to wait for.
			if lag := at.Sub(stands); stands.IsZero() || lag <= alignSlack || lag >= alignBand {
				continue
			}
		}
		if s := pos.moved.Add(a.stall); !behind || s.Before(stalls) {
			stalls, behind = s, true
		}
	}
	return stalls, behind
}

// handed records tp's chunk handed over, its last record at record time last; atEnd: it was the last the
// partition held.
func (a *aligner) handed(tp topicPartition, last time.Time, atEnd bool) {
	a.mu.Lock()
	a.parts[tp] = partitionPosition{placed: true, handed: last, caughtUp: atEnd, moved: time.Now()}
	a.moveLocked()
	a.mu.Unlock()
}

// caughtUp records a fetch of tp that found nothing past its end.
func (a *aligner) caughtUp(tp topicPartition) {
	a.mu.Lock()
	pos := a.parts[tp]
	pos.placed, pos.caughtUp, pos.moved = true, true, time.Now()
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
