package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// typeCountsCache keeps the last per-type counts and runs at most one scan at a time: callers within the
// TTL get the kept counts, callers during a scan wait for it and share its result (or error).
type typeCountsCache struct {
	mu      sync.Mutex
	last    *typeCounts
	running *typeCountsRun
}

type typeCounts struct {
	online, interrupted map[string]int64
	at                  time.Time
}

type typeCountsRun struct {
	done chan struct{}
	val  *typeCounts
	err  error
}

func (c *typeCountsCache) get(ctx context.Context, now func() time.Time, ttl time.Duration,
	count func(context.Context) (online, interrupted map[string]int64, err error)) (*typeCounts, error) {
	c.mu.Lock()
	if c.last != nil && now().Sub(c.last.at) < ttl {
		last := c.last
		c.mu.Unlock()
		return last, nil
	}
	if run := c.running; run != nil {
		c.mu.Unlock()
		select {
		case <-run.done:
			return run.val, run.err
		case <-ctx.Done():
			return nil, fmt.Errorf("daemon: waiting for the per-type counts: %w", ctx.Err())
		}
	}
	run := &typeCountsRun{done: make(chan struct{})}
	c.running = run
	c.mu.Unlock()
	// Not the request's context: the others waiting for this scan must not fail with its caller.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), typeCountsTimeout)
	online, interrupted, err := count(sctx)
	cancel()
	run.err = err
	if err == nil {
		run.val = &typeCounts{online: online, interrupted: interrupted, at: now()}
	}
	c.mu.Lock()
	if err == nil {
		c.last = run.val
	}
	c.running = nil
	c.mu.Unlock()
	close(run.done)
	return run.val, run.err
}
