package loop

import (
	"context"
	"fmt"
	"time"
)

// Options configures Every.
type Options struct {
	// Interval is the time from one run's start to the next while fn succeeds; it must be positive.
	Interval time.Duration
	// Immediate makes the first run start at once instead of after one Interval.
	Immediate bool
	// MaxBackoff caps the wait after consecutive failures: it starts at Interval and doubles, with
	// jitter (see Delay). 0 or less than Interval: Interval, so failures only add jitter.
	MaxBackoff time.Duration
	// OnError is told about each failure (failures counts consecutive ones from 1) and the wait before
	// the next run. A failure while ctx is ending is not reported. nil = ignore.
	OnError func(err error, failures int, retryIn time.Duration)
	// OnRecover is told when fn succeeds after failures. nil = ignore.
	OnRecover func(failures int)
	// Sooner, when set, is asked after each successful run how long until the next must start at the
	// latest: fn knows of a moment before the next Interval (a peer's lease running out). 0 or less: the
	// Interval alone.
	Sooner func() time.Duration
}

// Every runs fn every o.Interval until ctx is done, backing off with jitter while it fails; it returns
// when ctx is done. fn runs in the caller's goroutine, one run at a time.
func Every(ctx context.Context, o Options, fn func(context.Context) error) {
	if o.Interval <= 0 {
		panic(fmt.Sprintf("loop: Every needs a positive interval, got %v", o.Interval))
	}
	b := Backoff{Min: o.Interval, Max: max(o.MaxBackoff, o.Interval)}
	failures := 0
	wait := o.Interval
	if o.Immediate {
		wait = 0
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		start := time.Now()
		err := fn(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failures++
			wait = b.Next()
			if o.OnError != nil {
				o.OnError(err, failures, wait)
			}
		} else {
			if failures > 0 && o.OnRecover != nil {
				o.OnRecover(failures)
			}
			failures = 0
			b.Reset()
			// Start to start, like a ticker: a slow run does not stretch the period (lease renewals).
			wait = max(o.Interval-time.Since(start), 0)
			if o.Sooner != nil {
				if d := o.Sooner(); d > 0 && d < wait {
					wait = d
				}
			}
		}
		timer.Reset(wait)
	}
}

// RetryOptions configures Retry.
type RetryOptions struct {
	Backoff Backoff
	// Permanent tells an error that retrying cannot fix; Retry returns it at once. nil = retry every error.
	Permanent func(error) bool
	// OnError is told about each failure that will be retried (failures counts from 1) and the wait before
	// the next attempt. nil = ignore.
	OnError func(err error, failures int, retryIn time.Duration)
}

// Retry calls fn until it returns nil or a permanent error, backing off with jitter in between. It
// returns nil, the permanent error, or ctx's error when ctx ended first.
func Retry(ctx context.Context, o RetryOptions, fn func(context.Context) error) error {
	for failures := 1; ; failures++ {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("loop: %w", ctx.Err())
		}
		if o.Permanent != nil && o.Permanent(err) {
			return err
		}
		wait := o.Backoff.Next()
		if o.OnError != nil {
			o.OnError(err, failures, wait)
		}
		if !Sleep(ctx, wait) {
			return fmt.Errorf("loop: %w", ctx.Err())
		}
	}
}
