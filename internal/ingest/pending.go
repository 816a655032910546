package ingest

import (
	"sync"
	"time"
)

// pendingArrivals holds the arrival times of the messages handed on and not yet acknowledged, in
// arrival order, so a source without offsets (MQTT) can say how long its oldest unwritten message has
// waited. How long the flow has gone without progress is not that: after a Redis outage the backlog
// drains steadily while its oldest message is seconds old, and a deadline claimed meanwhile may miss
// a signal that already arrived.
type pendingArrivals struct {
	mu      sync.Mutex
	first   uint64         // the sequence number of entries[0]
	entries []pendingEntry // arrival order; the acknowledged ones at the front are dropped
}

type pendingEntry struct {
	at   time.Time
	done bool
}

// add records a message that arrived at at and returns its sequence number for done.
func (p *pendingArrivals) add(at time.Time) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.entries = append(p.entries, pendingEntry{at: at})
	return p.first + uint64(len(p.entries)) - 1
}

// done records that message seq was acknowledged (or given up): it waits no more.
func (p *pendingArrivals) done(seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := seq - p.first
	if seq < p.first || i >= uint64(len(p.entries)) {
		return
	}
	p.entries[i].done = true
	k := 0
	for k < len(p.entries) && p.entries[k].done {
		k++
	}
	if k > 0 {
		// Re-slicing keeps the array; append moves the live entries to a new one when it fills, so
		// memory follows the number waiting.
		p.entries, p.first = p.entries[k:], p.first+uint64(k)
	}
}

// oldest is the arrival time of the oldest message still waiting; false when none waits.
func (p *pendingArrivals) oldest() (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.entries) == 0 {
		return time.Time{}, false
	}
	return p.entries[0].at, true
}

// lag is how long the oldest waiting message has waited at now; 0 when none waits.
func (p *pendingArrivals) lag(now time.Time) time.Duration {
	if at, ok := p.oldest(); ok {
		return max(0, now.Sub(at))
	}
	return 0
}
