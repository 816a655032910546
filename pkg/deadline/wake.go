package deadline

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Waking children (docs/concepts.md, gateways). A child whose parent is silent too waits for the parent's
// verdict; the verdict wakes it. A gateway storm is thousands of such children, and each one's
// `suppressed` is as certain as a plain `interrupted` once its parent is down, so it is committed the
// same way (doc.go, "commit"): the wake marks the waiting children of a down parent in their slot's
// woken hash, and the claim that finds a marked child still waiting stores `suppressed` as sent
// (stateSuppressedFormat, the next look ParentRecheck away) under its in-flight record. The alarm loop
// publishes it and releases the record; Decide alone says whether the commit stands
// (Claim.CommittedSuppression), and the claims where it does not are acknowledged as any other.

// ParentRecheck is how often a suppressed device looks at its parent again, besides being woken when
// the parent recovers: the safety net for a wake-up that never came.
const ParentRecheck = time.Minute

// childrenPage bounds one SSCAN of a parent's children.
const childrenPage = 1000

// Verdict is a device's new verdict, which its children wait on: Down when it was interrupted or
// suppressed, not Down when it recovered.
type Verdict struct {
	Device string
	Down   bool
}

// WakeChildren makes the open incidents of the children of the verdicts' devices due at (only existing
// alarm entries, only earlier), so the alarm loop looks at them again now that their parent's verdict
// changed: a child waiting for its parent, or suppressed under a parent that recovered. A child with no
// open incident has no alarm entry and is left alone; a child of a Down parent is marked for the claim,
// which commits its `suppressed` if it still waits. It reads nothing while the fleet has no parents,
// looks only at the devices named as a parent (namedOnly), bumps the verdicts counter before it wakes
// anyone (parentViews), and reads the first page of every parent's children in the same round trip. It
// returns how many entries moved.
func (s *Store) WakeChildren(ctx context.Context, verdicts []Verdict, at time.Time) (int64, error) {
	if used, err := s.parentsUsed(ctx); err != nil || !used || len(verdicts) == 0 {
		return 0, err
	}
	// A down parent's mark for its children: the wake's time and the parent whose verdict it was, built
	// once per parent; "" for a parent that recovered.
	marks := make(map[string]string, len(verdicts))
	parents := make([]string, len(verdicts))
	for i, v := range verdicts {
		parents[i] = v.Device
		if v.Down {
			marks[v.Device] = strconv.FormatInt(at.UnixMilli(), 10) + packSep + v.Device
		}
	}
	parents, err := s.namedOnly(ctx, parents)
	if err != nil || len(parents) == 0 {
		return 0, err
	}
	cursors := make([]uint64, len(parents))
	pending := make([]int, len(parents))
	for i := range pending {
		pending[i] = i
	}
	var woken int64
	first := true
	for len(pending) > 0 {
		pipe := s.rdb.Pipeline()
		if first { // before any entry moves: the views read before it may be stale
			pipe.Incr(ctx, s.keys.parentVerdicts())
			first = false
		}
		cmds := make([]*redis.ScanCmd, len(pending))
		for j, i := range pending {
			cmds[j] = pipe.SScan(ctx, s.keys.children(parents[i]), cursors[i], "", childrenPage)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return woken, fmt.Errorf("deadline: children: %w", err)
		}
		var kids []wakeUp
		next := pending[:0]
		for j, i := range pending {
			page, cur := cmds[j].Val()
			for _, kid := range page {
				kids = append(kids, wakeUp{child: kid, mark: marks[parents[i]]})
			}
			if cursors[i] = cur; cur != 0 {
				next = append(next, i)
			}
		}
		pending = next
		if len(kids) > 0 {
			n, err := s.wake(ctx, kids, at.UnixMilli())
			woken += n
			if err != nil {
				return woken, err
			}
			if n > 0 {
				select {
				case s.woken <- struct{}{}:
				default:
				}
			}
		}
	}
	return woken, nil
}

// wakeUp is one child to wake and, when its parent is down, the mark the claim reads (claim.go).
type wakeUp struct {
	child, mark string
}

// wokenTTL bounds how long a slot's wake marks outlive its last wake: a child is claimed within
// moments of its wake, and a mark never read (a child that had no open incident) must not stay for good.
// A mark gone only costs its child the ordinary claim and acknowledgement.
const wokenTTL = 10 * time.Minute

// wake makes the children's alarm entries due at (ZADD XX LT: only existing entries, only earlier) and
// writes the marks of the children of down parents into their slot's woken hash, one pipeline for all
// slots (and the old slot while a doubling settles).
func (s *Store) wake(ctx context.Context, kids []wakeUp, at int64) (int64, error) {
	l := s.layout.Load()
	type slotWake struct {
		due   []redis.Z
		marks []any
	}
	bySlot := map[int]*slotWake{}
	add := func(slot int, k wakeUp) {
		w := bySlot[slot]
		if w == nil {
			w = &slotWake{}
			bySlot[slot] = w
		}
		w.due = append(w.due, redis.Z{Score: float64(at), Member: k.child})
		if k.mark != "" {
			w.marks = append(w.marks, k.child, k.mark)
		}
	}
	for _, k := range kids {
		add(Slot(k.child, l.Slots), k)
		if old, moved := l.oldSlot(k.child); moved {
			add(old, k)
		}
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, 0, len(bySlot))
	for slot, w := range bySlot {
		cmds = append(cmds, pipe.ZAddArgs(ctx, s.keys.alarms(slot), redis.ZAddArgs{XX: true, LT: true, Ch: true, Members: w.due}))
		if len(w.marks) > 0 {
			pipe.HSet(ctx, s.keys.woken(slot), w.marks...)
			pipe.Expire(ctx, s.keys.woken(slot), wokenTTL)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("deadline: wake children: %w", err)
	}
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	return n, nil
}
