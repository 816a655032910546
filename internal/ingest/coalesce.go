package ingest

import (
	"time"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

// coalescer remembers, per device, the signal time, type and parent of the last deadline write, so a
// write that would move the deadline by less than the window, and change neither, can be skipped
// (ingest.coalesce). A parent change is always written: the device leaves its former parent's children
// with it (docs/concepts.md, "Gateways (parents)"). Only the batcher goroutine uses it.
//
// Two generations bound its memory without a sweep over every entry: rotate (every window) drops the
// older generation, so only devices that wrote within the last two windows are kept. Forgetting a device
// costs one extra write, never a missed one.
type coalescer struct {
	window    int64 // ms
	cur, prev map[string]coalesceEntry
}

type coalesceEntry struct {
	seen   int64 // ms of the last written signal
	typ    string
	parent string // the last parent written ("" = none yet)
}

func newCoalescer(window time.Duration) *coalescer {
	return &coalescer{window: window.Milliseconds(), cur: map[string]coalesceEntry{}, prev: map[string]coalesceEntry{}}
}

// skip reports whether sig may go unwritten, and records it as written when not.
func (c *coalescer) skip(sig deadline.Signal) bool {
	e, ok := c.cur[sig.Device]
	if !ok {
		e, ok = c.prev[sig.Device]
	}
	ms := sig.Seen.UnixMilli()
	sameType := sig.Type == "" || sig.Type == e.typ
	sameParent := sig.Parent == "" || sig.Parent == e.parent
	if ok && ms < e.seen+c.window && sameType && sameParent {
		return true
	}
	next := coalesceEntry{seen: ms, typ: sig.Type, parent: sig.Parent}
	if ok {
		next.seen = max(ms, e.seen) // the store keeps the later deadline
		if sig.Type == "" {
			next.typ = e.typ
		}
		if sig.Parent == "" { // a signal naming none leaves the link as it is
			next.parent = e.parent
		}
	}
	c.cur[sig.Device] = next
	return false
}

func (c *coalescer) rotate() {
	c.prev = c.cur
	c.cur = make(map[string]coalesceEntry, len(c.prev))
}

// forget drops what the coalescer remembers of device: a reported failure or an offline message moved
// its deadline earlier than the last write it remembers, so its next signal (the recovery, or the
// reconnection) must be written, however soon it comes.
func (c *coalescer) forget(device string) {
	delete(c.cur, device)
	delete(c.prev, device)
}
