package deadline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/redisutil"
)

// What a gateway storm costs beyond its own verdicts (docs/concepts.md, "Gateways (parents)"): the children of a
// parent that went down are woken in batches, and each batch judges them against the same few hundred
// parents. Two keys keep that to one read per parent and a wake only where there are children:
//
//   - <prefix>:parents:named:{<bucket>}: SET of the devices some device's link names as its parent, the
//     bucket = crc32(parent) mod parentBuckets; written with the link and dropped once the parent's
//     children set is empty (unlink, parents.go), so WakeChildren looks for the children of those devices
//     only. <prefix>:parents:any holds parentsNamed once every link was written with
//     it; a fleet whose links an older version wrote, or whose Redis lost data (value 1), wakes every
//     device's children, as before;
//   - <prefix>:parents:verdicts: a counter WakeChildren bumps before it wakes anyone, so a replica's
//     views of down parents (parentViews) are read again once any parent's verdict changed.

func (k Keyspace) namedParents(parent string) string {
	return k.prefix + ":parents:named:" + bucket(parent)
}

func (k Keyspace) parentVerdicts() string { return k.prefix + ":parents:verdicts" }

// parentsNamed is <prefix>:parents:any's value when every parent is in the named-parents sets.
const parentsNamed = "named"

// queueInUse marks the fleet as having parents, once per pipeline that writes links. SET NX: a fleet
// marked by an older version keeps its mark, which says its parents may be missing from the sets.
func (s *Store) queueInUse(ctx context.Context, pipe redis.Pipeliner) {
	pipe.SetNX(ctx, s.keys.parentsInUse(), parentsNamed, 0)
}

// allNamed reports whether every parent of the fleet is in the named-parents sets, checked at most
// every inUseTTL: a replica of an older version overwriting the mark is noticed within that. After a
// data loss the store sets the mark back to 1 for every replica: the sets may have lost parents.
func (s *Store) allNamed(ctx context.Context) (bool, error) {
	l := &s.links
	if l.unnamed.Load() {
		if err := s.rdb.SetXX(ctx, s.keys.parentsInUse(), 1, 0).Err(); err != nil {
			return false, fmt.Errorf("deadline: parents in use: %w", err)
		}
		l.unnamed.Store(false)
	}
	now := s.now().UnixMilli()
	if last := l.namedChecked.Load(); now-last < inUseTTL.Milliseconds() && last != 0 {
		return l.named.Load(), nil
	}
	v, err := s.rdb.Get(ctx, s.keys.parentsInUse()).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, fmt.Errorf("deadline: parents in use: %w", err)
	}
	l.named.Store(v == parentsNamed)
	l.namedChecked.Store(now)
	return v == parentsNamed, nil
}

// namedOnly returns the devices some device named as its parent, one SMISMEMBER per bucket in one
// round trip; all of them while the sets may be incomplete (allNamed).
func (s *Store) namedOnly(ctx context.Context, devices []string) ([]string, error) {
	if all, err := s.allNamed(ctx); err != nil || !all {
		return devices, err
	}
	byKey := redisutil.GroupByKey(len(devices), func(i int) string { return s.keys.namedParents(devices[i]) })
	pipe := s.rdb.Pipeline()
	cmds := make(map[string]*redis.BoolSliceCmd, len(byKey))
	for k, idx := range byKey {
		cmds[k] = pipe.SMIsMember(ctx, k, redisutil.Pick[any](devices, idx)...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("deadline: named parents: %w", err)
	}
	named := make([]bool, len(devices))
	for k, idx := range byKey {
		for j, ok := range cmds[k].Val() {
			named[idx[j]] = ok
		}
	}
	return redisutil.Kept[string](devices, named), nil
}

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
// last verdict change (parentViews), the others in one round trip. The counter is read first, so a view
// kept is no older than the counter's value it is kept under.
func (s *Store) Parents(ctx context.Context, ids []string) (map[string]Parent, error) {
	out := make(map[string]Parent, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	gen, err := s.rdb.Get(ctx, s.keys.parentVerdicts()).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("deadline: parents' verdicts: %w", err)
	}
	now := s.now()
	missing := s.links.views.lookup(ids, gen, now, out)
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
	s.links.views.keep(read, gen, now)
	return out, nil
}
