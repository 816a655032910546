package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// typeCountsCache keeps the last per-type counts for a TTL and runs at most one scan at a time: callers
// during a scan wait for it and share its result (or error); a failure is shared, not kept.
type typeCountsCache struct {
	scans singleflight.Group
	mu    sync.Mutex
	last  *typeCounts
}

type typeCounts struct {
	online, interrupted map[string]int64
	at                  time.Time
}

func (c *typeCountsCache) get(ctx context.Context, now func() time.Time, ttl time.Duration,
	count func(context.Context) (online, interrupted map[string]int64, err error)) (*typeCounts, error) {
	if last := c.fresh(now, ttl); last != nil {
		return last, nil
	}
	ch := c.scans.DoChan("", func() (any, error) {
		// Again inside: a scan that ended between the look above and DoChan left its result.
		if last := c.fresh(now, ttl); last != nil {
			return last, nil
		}
		// Not the caller's context: the others waiting for this scan must not fail with its caller.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), typeCountsTimeout)
		defer cancel()
		online, interrupted, err := count(sctx)
		if err != nil {
			return nil, err
		}
		tc := &typeCounts{online: online, interrupted: interrupted, at: now()}
		c.mu.Lock()
		c.last = tc
		c.mu.Unlock()
		return tc, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.(*typeCounts), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("daemon: waiting for the per-type counts: %w", ctx.Err())
	}
}

// fresh is the last scan's counts while younger than ttl, else nil.
func (c *typeCountsCache) fresh(now func() time.Time, ttl time.Duration) *typeCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last != nil && now().Sub(c.last.at) < ttl {
		return c.last
	}
	return nil
}
