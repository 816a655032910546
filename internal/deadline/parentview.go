package deadline

import (
	"context"
	"sync"
	"time"
)

// A gateway storm's children are judged against the same few hundred parents, batch after batch: a
// replica remembers the views of the parents that are down until any parent's verdict changes
// (internal/parents counts the verdicts; WakeChildren moves the counter before it wakes anyone).

// parentViewTTL bounds how long a down parent's view is trusted without a verdict change: what changes
// no verdict (a deleted parent, its signal before its `recovered` is out) is seen within this long.
const parentViewTTL = 2 * time.Second

// parentViewsMax bounds the views a replica remembers; past it they are dropped and read again.
const parentViewsMax = 1 << 16

// parentViews remembers the views of parents that are down, read while the verdicts counter had the
// value gen. Only down views: a silent parent not yet declared down changes with its next verdict or
// signal, so it is read every time, and a child waiting for it is judged on what Redis holds now.
type parentViews struct {
	mu    sync.Mutex
	gen   int64
	views map[string]cachedParent
}

type cachedParent struct {
	p    Parent
	read int64 // unix ms
}

// lookup puts the views remembered of ids into out, after forgetting them all when gen moved on, and
// returns the ids it had no view of.
func (c *parentViews) lookup(ids []string, gen int64, now time.Time, out map[string]Parent) []string {
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

// keep remembers the down views among read, read at now after the counter was gen; nothing when the
// counter moved on meanwhile.
func (c *parentViews) keep(read map[string]Parent, gen int64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	for id, p := range read {
		if !p.Down {
			continue
		}
		if c.views == nil || len(c.views) >= parentViewsMax {
			c.views = make(map[string]cachedParent)
		}
		c.views[id] = cachedParent{p: p, read: now.UnixMilli()}
	}
}

func (c *parentViews) forgetAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.views = nil
}

// Parents reads what the alarm loop needs of each parent: the views of down parents remembered since the
// last verdict change (parentViews, the verdicts counter of internal/parents), the others in one round trip. The counter is read first, so a view
// kept is no older than the counter's value it is kept under.
func (s *Store) Parents(ctx context.Context, ids []string) (map[string]Parent, error) {
	out := make(map[string]Parent, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	gen, err := s.links.Verdicts(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	missing := s.views.lookup(ids, gen, now, out)
	if len(missing) == 0 {
		return out, nil
	}
	read, err := s.readParents(ctx, missing)
	if err != nil {
		return nil, err
	}
	for id, p := range read {
		out[id] = p
	}
	s.views.keep(read, gen, now)
	return out, nil
}
