package parents

import (
	"context"
	"errors"
	"fmt"
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
//     children set is empty (unlink), so a wake looks for the children of those devices only
//     (NamedOnly). <prefix>:parents:any holds parentsNamed once every link was written with it; a fleet
//     whose links an older version wrote, or whose Redis lost data (value 1), wakes every device's
//     children, as before;
//   - <prefix>:parents:verdicts: a counter a wake bumps before it wakes anyone (WalkChildren), so a
//     replica's views of down parents (internal/deadline's Store.Parents) are read again once any
//     parent's verdict changed.

// parentsNamed is <prefix>:parents:any's value when every parent is in the named-parents sets.
const parentsNamed = "named"

// inUseTTL is how long a replica trusts its answer to "does the fleet have parents?". A replica that
// writes a link knows at once; the others learn within this long.
const inUseTTL = 2 * time.Second

// QueueInUse marks the fleet as having parents, once per pipeline that writes links. SET NX: a fleet
// marked by an older version keeps its mark, which says its parents may be missing from the sets.
func (l *Links) QueueInUse(ctx context.Context, pipe redis.Pipeliner) {
	pipe.SetNX(ctx, l.keys.inUse(), parentsNamed, 0)
}

// Used reports whether any device of the fleet has a parent.
func (l *Links) Used(ctx context.Context) (bool, error) {
	if l.inUse.Load() {
		return true, nil
	}
	now := time.Now().UnixMilli()
	if last := l.checked.Load(); now-last < inUseTTL.Milliseconds() {
		return false, nil
	}
	n, err := l.rdb.Exists(ctx, l.keys.inUse()).Result()
	if err != nil {
		return false, fmt.Errorf("parents: parents in use: %w", err)
	}
	l.checked.Store(now)
	if n > 0 {
		l.inUse.Store(true)
	}
	return n > 0, nil
}

// ParentsOf returns each device's parent ("" for none), in one round trip; nothing at all while no
// device of the fleet has a parent.
func (l *Links) ParentsOf(ctx context.Context, devices []string) ([]string, error) {
	out := make([]string, len(devices))
	if len(devices) == 0 {
		return out, nil
	}
	if used, err := l.Used(ctx); err != nil || !used {
		return out, err
	}
	keyOf := func(i int) string { return l.keys.parents(devices[i]) }
	err := redisutil.FieldsByKey(ctx, l.rdb, keyOf, devices, func(i int, v string) { out[i] = v })
	if err != nil {
		return nil, fmt.Errorf("parents: parents: %w", err)
	}
	return out, nil
}

// QueueParentOf queues the read of device's parent in pipe (its value "" for none, or redis.Nil).
func (l *Links) QueueParentOf(ctx context.Context, pipe redis.Pipeliner, device string) *redis.StringCmd {
	return pipe.HGet(ctx, l.keys.parents(device), device)
}

// allNamed reports whether every parent of the fleet is in the named-parents sets, checked at most
// every inUseTTL: a replica of an older version overwriting the mark is noticed within that. After a
// data loss the store sets the mark back to 1 for every replica: the sets may have lost parents.
func (l *Links) allNamed(ctx context.Context) (bool, error) {
	if l.unnamed.Load() {
		if err := l.rdb.SetXX(ctx, l.keys.inUse(), 1, 0).Err(); err != nil {
			return false, fmt.Errorf("parents: parents in use: %w", err)
		}
		l.unnamed.Store(false)
	}
	now := l.now().UnixMilli()
	if last := l.namedChecked.Load(); now-last < inUseTTL.Milliseconds() && last != 0 {
		return l.named.Load(), nil
	}
	v, err := l.rdb.Get(ctx, l.keys.inUse()).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, fmt.Errorf("parents: parents in use: %w", err)
	}
	l.named.Store(v == parentsNamed)
	l.namedChecked.Store(now)
	return v == parentsNamed, nil
}

// NamedOnly returns the devices some device named as its parent, one SMISMEMBER per bucket in one
// round trip; all of them while the sets may be incomplete (allNamed).
func (l *Links) NamedOnly(ctx context.Context, devices []string) ([]string, error) {
	if all, err := l.allNamed(ctx); err != nil || !all {
		return devices, err
	}
	byKey := redisutil.GroupByKey(len(devices), func(i int) string { return l.keys.namedParents(devices[i]) })
	pipe := l.rdb.Pipeline()
	cmds := make(map[string]*redis.BoolSliceCmd, len(byKey))
	for k, idx := range byKey {
		cmds[k] = pipe.SMIsMember(ctx, k, redisutil.Pick[any](devices, idx)...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("parents: named parents: %w", err)
	}
	named := make([]bool, len(devices))
	for k, idx := range byKey {
		for j, ok := range cmds[k].Val() {
			named[idx[j]] = ok
		}
	}
	return redisutil.Kept[string](devices, named), nil
}

// Verdicts reads the verdicts counter: a view of a parent read while it had this value stands until it
// moves (WalkChildren).
func (l *Links) Verdicts(ctx context.Context) (int64, error) {
	gen, err := l.rdb.Get(ctx, l.keys.verdicts()).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("parents: parents' verdicts: %w", err)
	}
	return gen, nil
}

// childrenPage bounds one SSCAN of a parent's children.
const childrenPage = 1000

// Child is a device found in parent's children set.
type Child struct {
	ID, Parent string
}

// WalkChildren reads the children sets of parents a page of each at a time, every parent's page in one
// round trip, and hands each round's children to visit, which runs before the next round is read. The
// first round moves the verdicts counter before any child is visited: the views of parents read before
// it may be stale (Verdicts).
func (l *Links) WalkChildren(ctx context.Context, parents []string, visit func(kids []Child) error) error {
	cursors := make([]uint64, len(parents))
	pending := make([]int, len(parents))
	for i := range pending {
		pending[i] = i
	}
	first := true
	for len(pending) > 0 {
		pipe := l.rdb.Pipeline()
		if first {
			pipe.Incr(ctx, l.keys.verdicts())
			first = false
		}
		cmds := make([]*redis.ScanCmd, len(pending))
		for j, i := range pending {
			cmds[j] = pipe.SScan(ctx, l.keys.children(parents[i]), cursors[i], "", childrenPage)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("parents: children: %w", err)
		}
		var kids []Child
		next := pending[:0]
		for j, i := range pending {
			page, cur := cmds[j].Val()
			for _, kid := range page {
				kids = append(kids, Child{ID: kid, Parent: parents[i]})
			}
			if cursors[i] = cur; cur != 0 {
				next = append(next, i)
			}
		}
		pending = next
		if err := visit(kids); err != nil {
			return err
		}
	}
	return nil
}
