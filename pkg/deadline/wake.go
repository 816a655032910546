package deadline

import (
	"context"
	"fmt"
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
// open incident has no alarm entry and is left alone; a waiting child of a Down parent is marked for the
// claim to commit its `suppressed`. It reads nothing while the fleet has no parents, looks only at the
// devices named as a parent (namedOnly), bumps the verdicts counter before it wakes anyone
// (parentViews), and reads the first page of every parent's children in the same round trip. It returns
// how many entries moved.
func (s *Store) WakeChildren(ctx context.Context, verdicts []Verdict, at time.Time) (int64, error) {
	if used, err := s.parentsUsed(ctx); err != nil || !used || len(verdicts) == 0 {
		return 0, err
	}
	down := make(map[string]bool, len(verdicts))
	parents := make([]string, len(verdicts))
	for i, v := range verdicts {
		parents[i], down[v.Device] = v.Device, v.Down
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
			cmds[j] = pipe.SScan(ctx, s.keys.Children(parents[i]), cursors[i], "", childrenPage)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return woken, fmt.Errorf("deadline: children: %w", err)
		}
		var kids []wakeUp
		next := pending[:0]
		for j, i := range pending {
			page, cur := cmds[j].Val()
			for _, kid := range page {
				kids = append(kids, wakeUp{child: kid, parentDown: down[parents[i]]})
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
		}
	}
	return woken, nil
}

// wakeUp is one child to wake, and whether its parent is down.
type wakeUp struct {
	child      string
	parentDown bool
}

// wakeScript wakes one slot's children: each existing alarm entry later than the wake moves to it, and
// each child of a down parent that has one is marked as woken then.
//
// KEYS[1] alarms  KEYS[2] woken
// ARGV[1] the wake (ms), then pairs: device, 1 when its parent is down (else 0)
// Reply: how many entries moved.
var wakeScript = newScript(`
${luaPieces}
local at = ARGV[1]
local kids = {}
for i = 2, #ARGV, 2 do kids[#kids+1] = ARGV[i] end
local scores = gather(kids, function(...) return redis.call('ZMSCORE', KEYS[1], ...) end)
local moved, marks, n = {}, {}, tonumber(at)
for k, m in ipairs(kids) do
  local sc = scores[k]
  if sc then
    if tonumber(sc) > n then
      moved[#moved+1] = at
      moved[#moved+1] = m
    end
    -- The claim looks at the state: a mark on an incident not waiting is read and dropped there.
    if ARGV[2 * k + 1] == '1' then
      marks[#marks+1] = m
      marks[#marks+1] = at
    end
  end
end
pieces(moved, 2, function(...) redis.call('ZADD', KEYS[1], ...) end)
pieces(marks, 2, function(...) redis.call('HSET', KEYS[2], ...) end)
return #moved / 2
`)

// wake runs wakeScript for the children, one call per slot (and per old slot while a doubling settles).
func (s *Store) wake(ctx context.Context, kids []wakeUp, at int64) (int64, error) {
	l := s.layout.Load()
	bySlot := map[int][]any{}
	add := func(slot int, k wakeUp) {
		if bySlot[slot] == nil {
			bySlot[slot] = []any{at}
		}
		down := "0"
		if k.parentDown {
			down = "1"
		}
		bySlot[slot] = append(bySlot[slot], k.child, down)
	}
	for _, k := range kids {
		add(Slot(k.child, l.Slots), k)
		if old, moved := l.oldSlot(k.child); moved {
			add(old, k)
		}
	}
	calls := make([]scriptCall, 0, len(bySlot))
	for slot, args := range bySlot {
		calls = append(calls, scriptCall{keys: []string{s.keys.Alarms(slot), s.keys.Woken(slot)}, args: args})
	}
	cmds, err := s.runAll(ctx, wakeScript, calls)
	if err != nil {
		return 0, fmt.Errorf("deadline: wake children: %w", err)
	}
	var n int64
	for _, c := range cmds {
		v, err := c.Int64()
		if err != nil {
			return n, fmt.Errorf("deadline: wake children: %w", err)
		}
		n += v
	}
	return n, nil
}
