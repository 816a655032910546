package ingest

import "time"

// When a partial batch waits for more instead of going out (the batcher's one judgement of a stream).

// followsShare: a batch goes on from the previous one (batch.follows) when that carried at least
// 1/followsShare of Batch, a stream of about Batch/(followsShare·Linger) signals a second (25k/s by
// default) or more; a slower one is not held for company.
const followsShare = 8

// streamQuiet is the part of Linger without a new signal after which a stream counts as paused: a
// broker that sends no more until what it sent is acknowledged (an MQTT in-flight window) is not waited
// for.
const streamQuiet = 5

// newBatch takes a batch from the pool, begun now; sent is when the previous batch went out, sentN its
// messages.
func (c *Chain) newBatch(sent time.Time, sentN int) *batch {
	b := c.pool.Get().(*batch)
	now := time.Now()
	b.began, b.last, b.gated = now, time.Time{}, false
	b.streaming = c.inFlight.Load() > 0
	b.follows = now.Sub(sent) < c.opts.Linger && sentN*followsShare >= c.opts.Batch
	return b
}

// waitsForStream reports whether b waits for more now that nothing is in flight, so that under a steady
// load it is as full as a backlog's batches instead of going out small each time the previous write
// returns or the source hands over its next few (a deadline write's fixed cost is shared by the signals
// it carries, docs/benchmarks.md). linger is moved to when b stops waiting.
//
// A Kafka batch going on from a fast stream's previous batch (batch.follows) waits out its Linger
// unless it fills first: its signals come a fetch at a time, and the pauses between fetches say nothing
// about the stream's pace. Another batch begun while a write was in flight waits while its signals come
// at a pace that fills it within Linger and keep coming; any other goes out at once.
func (c *Chain) waitsForStream(b *batch, linger *time.Timer) bool {
	if b.follows && !b.gated {
		// linger, armed when b began, ends the wait: one timer per batch, not a reset per fetch.
		return time.Since(b.began) < c.opts.Linger
	}
	n := len(b.items)
	if !b.streaming || n < 2 {
		return false
	}
	last := b.last
	if last.Before(b.began) {
		last = b.began
	}
	behind := b.began.Add(c.opts.Linger * time.Duration(n) / time.Duration(c.opts.Batch))
	wait := time.Until(minTime(behind, last.Add(c.opts.Linger/streamQuiet)))
	if wait <= 0 {
		return false
	}
	linger.Reset(wait)
	return true
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
