// Package loop is how heartbeatd's background work waits: one exponential backoff with jitter, a
// context-aware sleep, a periodic worker (Every) and a retry-until-it-works helper (Retry).
//
// The jitter matters after an outage: without it every replica retries Redis or Kafka at the same
// instants, and the recovering server takes all of them at once.
package loop

import (
	"context"
	"math/rand/v2"
	"time"
)

// Zero-value bounds of a Backoff.
const (
	defaultMin = 10 * time.Millisecond
	defaultMax = time.Second
)

// jitter returns a uniform duration in [0, n]; tests replace it.
var jitter = func(n time.Duration) time.Duration { return rand.N(n + 1) }

// Delay is the wait before retry attempt+1 (attempt counts from 0): min doubled attempt times, capped at
// max, then drawn uniformly from its upper half. Half is kept fixed so a retry never comes at once, and
// half is random so replicas that failed together do not retry together.
func Delay(attempt int, min, max time.Duration) time.Duration {
	if min <= 0 {
		min = defaultMin
	}
	if max < min {
		max = min
	}
	d := max
	if attempt < 62 {
		if s := min << attempt; s > 0 && s>>attempt == min && s < max {
			d = s
		}
	}
	return d/2 + jitter(d-d/2)
}

// Backoff hands out the Delay of consecutive failures; Reset after a success. The zero value backs off
// from defaultMin to defaultMax. Not safe for concurrent use.
type Backoff struct {
	Min, Max time.Duration
	attempt  int
}

// Next returns the wait before the next attempt and counts this failure.
func (b *Backoff) Next() time.Duration {
	max := b.Max
	if max <= 0 {
		max = defaultMax
	}
	d := Delay(b.attempt, b.Min, max)
	if b.attempt < 62 {
		b.attempt++
	}
	return d
}

// Reset starts the backoff over after a success.
func (b *Backoff) Reset() { b.attempt = 0 }

// Sleep waits d or until ctx is done; false when ctx ended first.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
