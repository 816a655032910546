package ingest

import (
	"sync"
	"time"
)

// offsetTracker decides what may be committed. Kafka keeps one offset per partition, so committing offset
// n says every message below n is done: a partition's offset moves only past a contiguous run of applied
// messages, never past one still waiting for its Redis write (or its dead letter).
type offsetTracker struct {
	mu    sync.Mutex
	parts map[topicPartition]*partitionOffsets
	ready chan struct{} // something new may be committed
	onAck func()        // called on every acknowledgement (the source's flow accounting)

	lastRecord time.Time // record time of the last fetched message
}

type topicPartition struct {
	topic     string
	partition int
}

// partitionOffsets are the fetched, not yet committable messages of one partition, in fetch order.
type partitionOffsets struct {
	head    uint64 // seq of queue[0]
	queue   []pendingOffset
	last    int64 // offset of the last message fetched
	applied int64 // highest offset whose predecessors (as fetched) are all applied; -1 none
	commit  int64 // highest offset committed; -1 none
}

type pendingOffset struct {
	offset int64
	at     time.Time // when it was fetched, for the lag
	done   bool
}

func newOffsetTracker() *offsetTracker {
	return &offsetTracker{parts: map[topicPartition]*partitionOffsets{}, ready: make(chan struct{}, 1)}
}

// add records a fetched message and returns its acknowledgement.
func (t *offsetTracker) add(topic string, partition int, offset int64, recordTime time.Time) func() {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lastRecord = recordTime
	tp := topicPartition{topic, partition}
	p := t.parts[tp]
	if p == nil || offset <= p.last {
		// First message, or the partition was fetched again from an earlier offset (a rebalance gave it
		// back from its committed offset): start over. Acknowledgements of the old run land on the
		// detached state and commit nothing.
		p = &partitionOffsets{last: -1, applied: -1, commit: -1}
		t.parts[tp] = p
	}
	p.last = offset
	seq := p.head + uint64(len(p.queue))
	p.queue = append(p.queue, pendingOffset{offset: offset, at: now})
	return func() {
		t.ack(tp, p, seq)
		if t.onAck != nil {
			t.onAck()
		}
	}
}

func (t *offsetTracker) signal() {
	select {
	case t.ready <- struct{}{}:
	default:
	}
}

func (t *offsetTracker) ack(tp topicPartition, p *partitionOffsets, seq uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.parts[tp] != p {
		return
	}
	p.queue[seq-p.head].done = true
	n := 0
	for n < len(p.queue) && p.queue[n].done {
		n++
	}
	if n == 0 {
		return
	}
	p.applied = p.queue[n-1].offset
	clear(p.queue[:n])
	p.queue = p.queue[n:]
	p.head += uint64(n)
	if len(p.queue) == 0 {
		p.queue = p.queue[:0:0] // let the array go; the next append starts small
	}
	t.signal()
}

// committable returns, per partition, the highest applied offset not yet committed.
func (t *offsetTracker) committable() map[topicPartition]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out map[topicPartition]int64
	for tp, p := range t.parts {
		if p.applied > p.commit {
			if out == nil {
				out = map[topicPartition]int64{}
			}
			out[tp] = p.applied
		}
	}
	return out
}

// committed records a successful commit.
func (t *offsetTracker) committed(done map[topicPartition]int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for tp, off := range done {
		if p := t.parts[tp]; p != nil && off > p.commit {
			p.commit = off
		}
	}
}

// lag is how long the oldest fetched message has waited to be applied: it grows while the chain is
// stalled; 0 when everything fetched is applied.
func (t *offsetTracker) lag(now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var lag time.Duration
	for _, p := range t.parts {
		if len(p.queue) > 0 {
			lag = max(lag, now.Sub(p.queue[0].at))
		}
	}
	return lag
}

// recordAge is how old the last fetched record is by its Kafka timestamp (0 when in the future).
func (t *offsetTracker) recordAge(now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lastRecord.IsZero() {
		return 0
	}
	return max(0, now.Sub(t.lastRecord))
}

// outstanding counts fetched messages not yet applied.
func (t *offsetTracker) outstanding() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, p := range t.parts {
		n += len(p.queue)
	}
	return n
}
