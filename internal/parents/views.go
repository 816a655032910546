package parents

import (
	"sync"
	"time"
)

// parentViewTTL bounds how long a down parent's view is trusted without a verdict change: what changes
// no verdict (a deleted parent, its signal before its `recovered` is out) is seen within this long.
const parentViewTTL = 2 * time.Second

// parentViewsMax bounds the views a replica remembers; past it they are dropped and read again.
const parentViewsMax = 1 << 16

// Views remembers the views P of parents that are down, read while the verdicts counter (Verdicts) had
// the value gen, so a gateway storm's batches of children are judged against one read of each parent.
// Only down views: a silent parent not yet declared down changes with its next verdict or signal, so it
// is read every time, and a child waiting for it is judged on what Redis holds now. The zero value is
// empty.
type Views[P any] struct {
	mu    sync.Mutex
	gen   int64
	views map[string]cachedView[P]
}

type cachedView[P any] struct {
	p    P
	read int64 // unix ms
}

// Lookup puts the views remembered of ids into out, after forgetting them all when gen moved on, and
// returns the ids it had no view of.
func (c *Views[P]) Lookup(ids []string, gen int64, now time.Time, out map[string]P) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		c.gen, c.views = gen, nil
	}
	var missing []string
	for _, id := range ids {
		if v, ok := c.views[id]; ok && now.UnixMilli()-v.read < parentViewTTL.Milliseconds() {
			out[id] = v.p
			continue
		}
		missing = append(missing, id)
	}
	return missing
}

// Keep remembers the views among read that down says are down, read at now after the counter was gen;
// nothing when the counter moved on meanwhile.
func (c *Views[P]) Keep(read map[string]P, gen int64, now time.Time, down func(P) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	for id, p := range read {
		if !down(p) {
			continue
		}
		if c.views == nil || len(c.views) >= parentViewsMax {
			c.views = make(map[string]cachedView[P])
		}
		c.views[id] = cachedView[P]{p: p, read: now.UnixMilli()}
	}
}

// ForgetAll forgets every view: Redis lost data.
func (c *Views[P]) ForgetAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.views = nil
}
