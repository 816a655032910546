package ingest

import (
	"sync"
	"sync/atomic"
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
}

type topicPartition struct {
	topic     string
	partition int
}

// partitionOffsets are the fetched, not yet committable runs of one partition, in fetch order.
type partitionOffsets struct {
	head    uint64 // seq of queue[0]
	queue   []pendingRun
	last    int64 // offset of the last message fetched
	applied int64 // highest offset whose predecessors (as fetched) are all applied; -1 none
	commit  int64 // highest offset committed; -1 none
}

// pendingRun is a run of fetched messages that counts as applied once every one of them is: one entry
// and one lock per run instead of per message.
type pendingRun struct {
	last int64     // offset of its last message
	at   time.Time // when it was fetched, for the lag
	n    int       // its messages
	done bool
}

func newOffsetTracker() *offsetTracker {
	return &offsetTracker{parts: map[topicPartition]*partitionOffsets{}, ready: make(chan struct{}, 1)}
}

// add records a run of a partition's messages fetched at now, offsets in fetch order, and returns the
// acknowledgement that each of them must call once: the run's offsets become committable after the
// last call. A run held back by one message holds back the rest of its partition anyway (Kafka commits
// one offset per partition), so tracking runs rather than messages delays no commit past a run.
func (t *offsetTracker) add(tp topicPartition, now time.Time, offsets []int64) func() {
	if len(offsets) == 0 {
		return func() {}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.parts[tp]
	if p == nil || offsets[0] <= p.last {
		// First message, or the partition was fetched again from an earlier offset (a rebalance gave it
		// back from its committed offset): start over. Acknowledgements of the old run land on the
		// detached state and commit nothing.
		p = &partitionOffsets{last: -1, applied: -1, commit: -1}
		t.parts[tp] = p
	}
	p.last = offsets[len(offsets)-1]
	r := &runAck{t: t, tp: tp, p: p, seq: p.head + uint64(len(p.queue))}
	r.left.Store(int64(len(offsets)))
	p.queue = append(p.queue, pendingRun{last: p.last, at: now, n: len(offsets)})
	return r.ack
}

// runAck counts down the acknowledgements of one run.
type runAck struct {
	left atomic.Int64
	t    *offsetTracker
	tp   topicPartition
	p    *partitionOffsets
	seq  uint64
}

// ack counts one message acknowledged, after its run's offsets are recorded if it was the run's last:
// a shutdown that waits for every message (onAck) then commits them.
func (r *runAck) ack() {
	if r.left.Add(-1) == 0 {
		r.t.ack(r.tp, r.p, r.seq)
	}
	if r.t.onAck != nil {
		r.t.onAck()
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
	p.applied = p.queue[n-1].last
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

// outstanding counts fetched messages of runs not yet applied.
func (t *offsetTracker) outstanding() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, p := range t.parts {
		for _, r := range p.queue {
			n += r.n
		}
	}
	return n
}

// groupWatch follows the whole consumer group from outside the partition readers: each partition's end
// offset against the offset the group committed, and the group's state and members. What one member
// fetched tells neither (a rebalance is invisible to it until it is over), and no member sees the
// others' partitions; committed offsets belong to the group, so every member reads them all.
//
// Every observation marks each partition's end offset with the time it was read. A record that was not
// there at a mark was appended after it, so the latest mark at or below the committed offset is a time
// before which everything was read, whatever the producers wrote as record timestamps. Those are used
// only for a backlog already there at the first observation.
type groupWatch struct {
	now   func() time.Time // the shared clock: marks are compared with other replicas' times
	mu    sync.Mutex
	parts map[topicPartition]*partitionWatch
	// observed is the last complete observation, started its first one; state and tags are the group's
	// state and its members' tags (kafkaMemberTag) as of observed.
	observed, started time.Time
	state             string
	tags              map[string]bool
	// quiet is the last observation at which the group was stable and this reader had not rebalanced,
	// quietBefore the one before it. revoked, when set, is the quiet observation before the last one
	// when a rebalance was seen (the revocation came later) and settled the first quiet one after it
	// (the new assignment was in place): the group is blind from revoked until every partition is read
	// past settled. One quiet observation is skipped because the last may have described the group
	// Stable after a quick rebalance whose new generation this reader reported a moment later.
	quiet, quietBefore, revoked, settled time.Time
	failing                              error
}

// partitionWatch is one partition as observed.
type partitionWatch struct {
	first     time.Time // first observation
	end       int64     // end offset (read committed) at the last observation
	committed int64     // the group's next offset to read, at the last observation
	// marks are (time, end offset), oldest first; marks[0] may be the latest one at or below committed,
	// and no older one is kept.
	marks []endMark
	// recordAt is the timestamp of the record at offset recordOffset (the oldest unread one when the
	// partition was first seen behind); -1: none fetched.
	recordOffset int64
	recordAt     time.Time
}

type endMark struct {
	at  time.Time
	end int64
}

// maxMarks bounds a stuck partition's marks (two a second at the default interval: minutes of them).
// Dropping the oldest only makes the partition look unread for longer.
const maxMarks = 512

// observation is what one round of requests found.
type observation struct {
	at        time.Time // when the end offsets were asked for
	ends      map[topicPartition]int64
	committed map[topicPartition]int64
	state     string
	tags      map[string]bool
	// rebalanced: this reader started a generation since the previous observation.
	rebalanced bool
}

func newGroupWatch(now func() time.Time) *groupWatch {
	return &groupWatch{now: now, parts: map[topicPartition]*partitionWatch{}}
}

// fold takes an observation in.
func (g *groupWatch) fold(o observation) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started.IsZero() {
		g.started = o.at
	}
	for tp, end := range o.ends {
		p := g.parts[tp]
		if p == nil {
			p = &partitionWatch{first: o.at, recordOffset: -1}
			g.parts[tp] = p
		}
		p.end, p.committed = end, o.committed[tp]
		if n := len(p.marks); n > 0 && p.marks[n-1].end == end {
			p.marks[n-1].at = o.at // nothing appended since: the latest time is the one that counts
		} else {
			p.marks = append(p.marks, endMark{at: o.at, end: end})
		}
		i := 0
		for i+1 < len(p.marks) && p.marks[i+1].end <= p.committed {
			i++
		}
		if len(p.marks)-i > maxMarks {
			i = len(p.marks) - maxMarks
		}
		p.marks = p.marks[i:]
	}
	for tp := range g.parts {
		if _, ok := o.ends[tp]; !ok {
			delete(g.parts, tp) // a topic deleted or no longer subscribed
		}
	}
	g.observed, g.state, g.tags, g.failing = o.at, o.state, o.tags, nil
	switch {
	case o.rebalanced || o.state != groupStable:
		if g.revoked.IsZero() {
			g.revoked = g.quietBefore
			if g.revoked.IsZero() {
				g.revoked = g.started // a rebalance from before the first observation: this process's join
			}
		}
		g.settled = time.Time{}
	default:
		g.quiet, g.quietBefore = o.at, g.quiet
		if g.revoked.IsZero() {
			break
		}
		if g.settled.IsZero() {
			g.settled = o.at
		}
		if g.readPastLocked(g.settled) {
			g.revoked, g.settled = time.Time{}, time.Time{}
		}
	}
}

// groupStable is the DescribeGroups state of a group that is not rebalancing.
const groupStable = "Stable"

// failed records a failed observation.
func (g *groupWatch) failed(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failing = err
	if g.started.IsZero() {
		g.started = g.now()
	}
}

// readPastLocked reports whether every partition was read past since: the group committed everything
// that had been appended at some mark at or after since.
func (g *groupWatch) readPastLocked(since time.Time) bool {
	for _, p := range g.parts {
		if len(p.marks) == 0 || p.marks[0].end > p.committed || p.marks[0].at.Before(since) {
			return false
		}
	}
	return true
}

// unreadSinceLocked is since when the oldest unread record of p may have waited; zero when p is read up
// to its end.
func (p *partitionWatch) unreadSinceLocked() time.Time {
	switch {
	case p.committed >= p.end:
		return time.Time{}
	case len(p.marks) > 0 && p.marks[0].end <= p.committed:
		return p.marks[0].at
	case p.recordOffset == p.committed && !p.recordAt.IsZero():
		return earliest(p.recordAt, p.first)
	}
	return p.first
}

// needRecordTimes lists the partitions behind since before the first observation whose oldest unread
// record's timestamp is not known yet.
func (g *groupWatch) needRecordTimes() map[topicPartition]int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out map[topicPartition]int64
	for tp, p := range g.parts {
		if p.committed < p.end && (len(p.marks) == 0 || p.marks[0].end > p.committed) && p.recordOffset != p.committed {
			if out == nil {
				out = map[topicPartition]int64{}
			}
			out[tp] = p.committed
		}
	}
	return out
}

// recordTime stores the timestamp of the record at offset of tp.
func (g *groupWatch) recordTime(tp topicPartition, offset int64, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p := g.parts[tp]; p != nil {
		p.recordOffset, p.recordAt = offset, at
	}
}

// status is the group's lag at now (how long its oldest unread record may have waited) and, when the
// group cannot be vouched for, since when and why: a rebalance whose partitions are not read past its
// start yet, or observations failing for longer than stale.
func (g *groupWatch) status(now time.Time, stale time.Duration) (lag time.Duration, blind time.Time, why string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range g.parts {
		if since := p.unreadSinceLocked(); !since.IsZero() {
			lag = max(lag, now.Sub(since))
		}
	}
	last := g.observed
	if last.IsZero() {
		last = g.started
	}
	switch {
	case !g.revoked.IsZero():
		blind, why = g.revoked, "rebalancing: partitions reassigned and not yet read past the rebalance"
	case !last.IsZero() && now.Sub(last) > stale:
		blind, why = last, "the group's offsets cannot be read"
		if g.failing != nil {
			why += ": " + g.failing.Error()
		}
	}
	return lag, blind, why
}

// lagOf is how long the oldest unread record of parts may have waited at now (the group's committed
// offsets, as status reads them for every partition).
func (g *groupWatch) lagOf(parts []topicPartition, now time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	var lag time.Duration
	for _, tp := range parts {
		if p := g.parts[tp]; p != nil {
			if since := p.unreadSinceLocked(); !since.IsZero() {
				lag = max(lag, now.Sub(since))
			}
		}
	}
	return lag
}

// readUpTo is the time up to which the group has read everything: the last observation, or the earliest
// time since which a partition's oldest unread record may have waited; zero before any observation.
func (g *groupWatch) readUpTo() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.observed
	if t.IsZero() {
		return t
	}
	for _, p := range g.parts {
		if since := p.unreadSinceLocked(); !since.IsZero() {
			t = earliest(t, since)
		}
	}
	return t
}

// takenOver reports whether the group has let go of member tag and read past since: it is stable, no
// rebalance is pending, no member carries the tag, and every partition was read past since.
func (g *groupWatch) takenOver(tag string, since time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.observed.After(since) && g.state == groupStable && g.revoked.IsZero() && !g.tags[tag] && g.readPastLocked(since)
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
