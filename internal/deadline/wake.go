package deadline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/parents"
	"github.com/heartbeatd/heartbeatd/internal/redisutil"
)

// Waking children (docs/concepts.md, "Gateways (parents)"). A child whose parent is silent too waits for the parent's
// verdict; the verdict wakes it. A gateway storm is thousands of such children, and each one's
// `suppressed` is as certain as a plain `interrupted` once its parent is down, so the wake itself commits
// it the way a claim commits a plain `interrupted` (doc.go, "commit"): one script per slot stores
// `suppressed` as sent (stateSuppressedFormat, the next look ParentRecheck away) for each waiting child
// that has not signalled since, under an in-flight record, and hands those claims to the caller, which
// publishes them and releases the record. Decide alone says whether the commit stands
// (Claim.CommittedSuppression); the claims where it does not are acknowledged as any other. A process
// that dies before releasing the record leaves its claims to the slot's owner once the lease ends, as a
// committed claim's. Every other child of a verdict (one not waiting, one of a parent that recovered) has
// its alarm entry made due now, for the slot's owner to claim.

// ParentRecheck is how often a suppressed device looks at its parent again, besides being woken when
// the parent recovers: the safety net for a wake-up that never came.
const ParentRecheck = time.Minute

// Verdict is a device's new verdict, which its children wait on: Down when it was interrupted or
// suppressed, not Down when it recovered.
type Verdict struct {
	Device string
	Down   bool
}

// WakeCommit is what a wake needs to commit the suppressions of waiting children: the lease of their
// in-flight record and the handler that publishes them and releases it.
type WakeCommit struct {
	Lease time.Duration
	// Handle receives each chunk's committed claims (at most wakeChunk) while the next chunk is woken;
	// calls come one at a time.
	Handle func(ctx context.Context, claims []Claim) error
}

// wakeChunk bounds the children one wake round trip takes, and so the claims it hands to
// WakeCommit.Handle at once: smaller chunks start publishing sooner. Before the children went slot by
// slot (slotOrder), 2048, 4096, 8192 and 16384 took a 100k-child storm 1.3–1.5×, 1.1–1.3×, 1.1–1.4×
// and 1.3–1.5× the same devices without parents (one run of three storms each).
const wakeChunk = 4096

// WakeChildren wakes the children of the verdicts' devices (only those with an open incident: a child
// without one has no alarm entry and is left alone). With commit set, a child of a Down parent still
// waiting for it is committed as suppressed and handed to commit.Handle; every other child's alarm entry
// is made due at (only earlier), so the alarm loop looks at it again now that its parent's verdict
// changed. It reads nothing while the fleet has no parents, looks only at the devices named as a parent
// (Links.NamedOnly), and reads their children a page of each at a time, every parent's page in one round
// trip, bumping the verdicts counter before it wakes anyone (Links.WalkChildren; the views of down
// parents, parents.Views). It returns how many children it woke.
func (s *Store) WakeChildren(ctx context.Context, verdicts []Verdict, at time.Time, commit *WakeCommit) (int64, error) {
	if used, err := s.links.Used(ctx); err != nil || !used || len(verdicts) == 0 {
		return 0, err
	}
	down := make(map[string]bool, len(verdicts))
	named := make([]string, len(verdicts))
	for i, v := range verdicts {
		named[i] = v.Device
		down[v.Device] = v.Down
	}
	named, err := s.links.NamedOnly(ctx, named)
	if err != nil || len(named) == 0 {
		return 0, err
	}
	var woken int64
	err = s.links.WalkChildren(ctx, named, func(page []parents.Child) error {
		kids := make([]wakeUp, len(page))
		for i, kid := range page {
			kids[i].child = kid.ID
			if down[kid.Parent] { // the parent, when down: its children's suppressions name it
				kids[i].downParent = kid.Parent
			}
		}
		ordered, slots := s.slotOrder(kids)
		n, err := s.wakeChunks(ctx, ordered, slots, at, commit)
		woken += n
		return err
	})
	return woken, err
}

// wakeChunks wakes kids in chunks of wakeChunk, and hands each chunk's committed suppressions to
// commit.Handle while the next chunk's scripts run: Redis commits one chunk while this process
// publishes the one before, as the scanner's loops overlap their claims. At most two chunks' claims are
// held at once. kids carry their slots among slots (slotOrder).
func (s *Store) wakeChunks(ctx context.Context, kids []wakeUp, slots int, at time.Time, commit *WakeCommit) (int64, error) {
	ready := make(chan []Claim)
	handled := make(chan error, 1)
	lease := time.Duration(0)
	if commit == nil {
		handled <- nil
	} else {
		lease = commit.Lease
		go func() {
			var first error
			for claims := range ready {
				if err := commit.Handle(ctx, claims); err != nil && first == nil {
					first = fmt.Errorf("deadline: the suppressions a wake committed: %w", err)
				}
			}
			handled <- first
		}()
	}
	var woken int64
	var err error
	for len(kids) > 0 && err == nil {
		chunk := kids[:min(len(kids), wakeChunk)]
		kids = kids[len(chunk):]
		var claims []Claim
		var n int64
		n, claims, err = s.wake(ctx, chunk, slots, at, commit != nil, lease)
		woken += n + int64(len(claims))
		if len(claims) > 0 {
			ready <- claims
		}
	}
	close(ready)
	return woken, errors.Join(err, <-handled)
}

// slotOrder orders kids by slot, keeping their order within one, so a chunk spans few slots: a script
// call's fixed cost is then shared by many children (a storm's 100k children, woken by six batches of
// gateways at once, cost 1,920 calls in chunks of 4096 drawn from all 64 slots, 291 sorted by slot). It
// stores each child's slot under the layout it read, whose slot count it returns, and counts instead of
// comparing: slots are few and a stable comparison sort of a storm's children took a tenth of its wake.
func (s *Store) slotOrder(kids []wakeUp) ([]wakeUp, int) {
	slots := s.layouts.Load().Slots
	start := make([]int, slots+1)
	for i := range kids {
		kids[i].slot = Slot(kids[i].child, slots)
		start[kids[i].slot+1]++
	}
	for i := 1; i < len(start); i++ {
		start[i] += start[i-1]
	}
	ordered := make([]wakeUp, len(kids))
	for _, k := range kids {
		ordered[start[k.slot]] = k
		start[k.slot]++
	}
	return ordered, slots
}

// wakeUp is one child to wake, its parent when that one is down ("": it recovered), and its slot
// (slotOrder).
type wakeUp struct {
	child, downParent string
	slot              int
}

// wakeScript wakes one slot's children (WakeChildren).
//
// KEYS[1] deadlines  KEYS[2] alarms  KEYS[3] state  KEYS[4] in-flight records  KEYS[5] causes
// ARGV[1] now (ms)  ARGV[2] lease (ms)  ARGV[3] the record of this call's commits, "" to commit none
// ARGV[4] ParentRecheck (ms)  ARGV[5] the children of down parents, ARGV[6] the others, each packed
// Reply: {entries made due, causes, committed}: causes as in the claim's reply; committed the record's
// packed pairs (device, committed state), in the order of ARGV[5].
//
// A child of a down parent is committed when its incident waits with nothing sent (stateWaitingPattern)
// and its deadline has not moved past the incident's (a signal since). The in-flight record holds each
// commit's device and state, so an expired record hands the suppressions out again (claim.go,
// handOutAgain). Every other child's alarm entry is made due now unless a claim holds it (probeDue).
var wakeScript = newScript(`
${luaPieces}
${luaProbe}
${luaLeased}
local now, record = tonumber(ARGV[1]), ARGV[3]
local floor = math.floor
local leased = leasedUntil(now + tonumber(ARGV[2]))
local recheckAt = string.format('%.0f', now + tonumber(ARGV[4]))
-- A suppression is its waiting state's deadline and type followed by this (stateSuppressedFormat).
local tail = ${stateSep} .. string.format(${stateSuppressedTail}, now)
local kids, due = {}, {}
for m in string.gmatch(ARGV[5], ${packedItem}) do kids[#kids+1] = m end
for m in string.gmatch(ARGV[6], ${packedItem}) do due[#due+1] = m end
if record == '' then
  for _, m in ipairs(kids) do due[#due+1] = m end
  kids = {}
end
local states, scores = {}, {}
if #kids > 0 then
  states = gather(kids, function(...) return redis.call('HMGET', KEYS[3], ...) end)
  scores = gather(kids, function(...) return redis.call('ZMSCORE', KEYS[1], ...) end)
end
-- hset is the committed pairs (device, suppression) until the guard is appended: the record's list too.
local hset, lease = {}, {}
for j, m in ipairs(kids) do
  local st, sc = states[j], scores[j]
  local dl, typ
  if st then dl, typ = string.match(st, ${stateWaitingPattern}) end
  if dl and not (sc and floor(tonumber(sc) / ${MaxTypes}) > tonumber(dl)) then
    local sup = dl .. ${stateSep} .. typ .. tail
    hset[#hset+1] = m
    hset[#hset+1] = sup
    lease[#lease+1] = recheckAt
    lease[#lease+1] = m
  else
    due[#due+1] = m
  end
end
local moved = probeDue(KEYS[2], now, due)
local causes, committed = {}, ''
if #hset > 0 then
  local n = #hset
  committed = table.concat(hset, ${packSep})
  hset[n+1] = ${stateGuardField}
  hset[n+2] = ${stateGuardValue}
  pieces(hset, 2, function(...) redis.call('HSET', KEYS[3], ...) end)
  pieces(lease, 2, function(...) redis.call('ZADD', KEYS[2], ...) end)
  redis.call('HSET', KEYS[4], record, committed)
  redis.call('ZADD', KEYS[2], leased, record)
  if redis.call('EXISTS', KEYS[5]) == 1 then
    local devs = {}
    for i = 1, n, 2 do devs[#devs+1] = hset[i] end
    local vals = gather(devs, function(...) return redis.call('HMGET', KEYS[5], ...) end)
    for k, d in ipairs(devs) do
      if vals[k] then
        causes[#causes+1] = d
        causes[#causes+1] = vals[k]
      end
    end
  end
end
return {moved, causes, committed}
`)

// slotWake is one slot's share of a wake: the children of down parents in the order the script gets
// them, and both packed lists.
type slotWake struct {
	down        []wakeUp
	packedDown  strings.Builder
	packedOther strings.Builder
}

func (w *slotWake) add(k wakeUp) {
	b := &w.packedOther
	if k.downParent != "" {
		w.down = append(w.down, k)
		b = &w.packedDown
	}
	if b.Len() > 0 {
		b.WriteString(packSep)
	}
	b.WriteString(k.child)
}

// wake runs wakeScript for kids, one call per slot (and the old slot while a doubling settles) in one
// round trip: it returns how many alarm entries it made due and the suppressions it committed. It commits
// nothing unless asked to, nor while a doubling settles (the claim drops a moved device's stale claims,
// Claim's dropStaleMoved; the wake leaves such children to it). It kicks this process's scanner when it
// made entries due. kids carry their slots among slots, recomputed if the layout changed since.
func (s *Store) wake(ctx context.Context, kids []wakeUp, slots int, at time.Time, commit bool, lease time.Duration) (int64, []Claim, error) {
	l := s.layouts.Load()
	bySlot := map[int]*slotWake{}
	add := func(slot int, k wakeUp) {
		w := bySlot[slot]
		if w == nil {
			w = &slotWake{}
			bySlot[slot] = w
		}
		w.add(k)
	}
	for _, k := range kids {
		if slots != l.Slots {
			k.slot = Slot(k.child, l.Slots)
		}
		add(k.slot, k)
		if old, moved := l.OldSlot(k.child); moved {
			add(old, k)
		}
	}
	record := ""
	if commit && !l.Moving() {
		record = s.newRecord()
	}
	called := make([]int, 0, len(bySlot))
	calls := make([]scriptCall, 0, len(bySlot))
	for slot, w := range bySlot {
		called = append(called, slot)
		calls = append(calls, scriptCall{Keys: []string{s.keys.Deadlines(slot), s.keys.alarms(slot), s.keys.state(slot),
			s.keys.inFlight(slot), s.keys.causes(slot)},
			Args: []any{at.UnixMilli(), lease.Milliseconds(), record, ParentRecheck.Milliseconds(), w.packedDown.String(), w.packedOther.String()}})
	}
	cmds, err := s.runAll(ctx, wakeScript, calls)
	if err != nil {
		return 0, nil, fmt.Errorf("deadline: wake children: %w", err)
	}
	var moved int64
	// Decoded first, so the claims are allocated once, as Claim does.
	replies := make([]wakeReply, len(cmds))
	committed := 0
	for i, cmd := range cmds {
		r, err := decodeWakeReply(cmd.Val())
		if err != nil {
			return moved, nil, fmt.Errorf("%w (slot %d)", err, called[i])
		}
		moved += r.moved
		replies[i] = r
		committed += len(r.committed) / 2
	}
	claims := make([]Claim, 0, committed)
	for i, r := range replies {
		if claims, err = s.appendSuppressions(ctx, claims, called[i], r, bySlot[called[i]].down, record); err != nil {
			return moved, nil, err
		}
	}
	if moved > 0 {
		select {
		case s.woken <- struct{}{}:
		default:
		}
	}
	return moved, claims, nil
}

// appendSuppressions appends the claims of one slot's committed suppressions (in r.committed, in the
// order of down, the children of down parents the script was given), each with the parent that woke it
// and its cause.
func (s *Store) appendSuppressions(ctx context.Context, claims []Claim, slot int, r wakeReply, down []wakeUp, record string) ([]Claim, error) {
	start, k := len(claims), 0
	for j := 0; j < len(r.committed); j += 2 {
		c, err := s.suppressionClaim(ctx, slot, r.committed[j], r.committed[j+1], record)
		if err != nil {
			return claims, err
		}
		for k < len(down) && down[k].child != c.Device {
			k++
		}
		if k == len(down) {
			return claims, fmt.Errorf("deadline: wake slot %d: committed %q, not a child it was given", slot, c.Device)
		}
		c.WokenBy = down[k].downParent
		claims = append(claims, c)
	}
	attachCauses(claims[start:], r.causes)
	return claims, nil
}

// wakeReply is one slot's wakeScript reply, every field checked by decodeWakeReply.
type wakeReply struct {
	moved     int64    // alarm entries made due
	causes    []string // pairs: device, stored cause
	committed []string // pairs: device, committed suppression (the in-flight record's list)
}

// decodeWakeReply reads v, a wakeScript reply as go-redis returns it.
func decodeWakeReply(v any) (wakeReply, error) {
	r := redisutil.ReplyReader{Script: "deadline: wake"}
	f := r.Fields(v, 3)
	if r.Err != nil {
		return wakeReply{}, r.Err
	}
	out := wakeReply{moved: r.Int(f[0], "moved"), causes: r.Strings(f[1], "causes", 2), committed: r.Packed(f[2], "committed", packSep, 2)}
	return out, r.Err
}
