package deadline

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/parents"
)

// AckOp is what the alarm loop did with a claim.
type AckOp byte

const (
	// Reschedule keeps the incident open and acts on it again at Ack.Next (a repeat), or never again
	// until the device recovers when Ack.Dormant is set (acknowledged, exhausted).
	Reschedule AckOp = 'R'
	// Remove ends the incident (recovered).
	Remove AckOp = 'X'
	// Park moves the claim to the dead set after too many publish failures; /v1/stats shows it.
	Park AckOp = 'P'
)

// Ack acknowledges one claim.
type Ack struct {
	Device  string
	Slot    int
	Op      AckOp
	Claimed int64     // State.Deadline of the claim: an ack for another incident is ignored
	Next    time.Time // Reschedule: when to act again
	Dormant bool      // Reschedule: no act until the device signals again
	State   State     // Reschedule, Park: the incident's new state
	// DropDeadline (ms), with Reschedule: the device's deadline set by a signal no newer than the
	// reported failure its incident began with; it leaves the deadlines set if it is still that one (a
	// signal since is kept, and its recovery reported). 0: none.
	DropDeadline int64
}

// ackScript applies one slot's acknowledgements, each guarded by the claimed incident's deadline so an
// ack never clobbers a newer incident, an operator's ack, or a signal that arrived meanwhile.
//
// KEYS[1] deadlines  KEYS[2] alarms  KEYS[3] state  KEYS[4] dead  KEYS[5] in-flight records
// ARGV[1] now (ms)  ARGV[2] in-flight records to release after the acks, packSep-separated
// then groups of six: op (R|X|P), device, claimed deadline (ms), next act (ms, or a dormant score: see
// dormantAfter), state, a stale deadline (ms) to drop with R (Ack.DropDeadline; 0: none)
// Reply: per op 1 when applied, 0 when the incident was gone or replaced.
//
// It reads every state and deadline with one HMGET and one ZMSCORE and writes with one command per kind:
// a redis.call costs more than the work it does for one device. A device appears at most once per call
// (Settle starts another call for a second ack of the same device, and calls run in order), so the
// script keeps no per-device tables.
var ackScript = newScript(`
${luaPieces}
local now = tonumber(ARGV[1])
local ms = {}
for i = 4, #ARGV, 6 do ms[#ms+1] = ARGV[i] end
local stored, scores = {}, {}
if #ms > 0 then
  stored = redis.call('HMGET', KEYS[3], unpack(ms))
  scores = redis.call('ZMSCORE', KEYS[1], unpack(ms))
end
local out, hset, hdel, alarms, unalarm, dead, undead, stale = {}, {}, {}, {}, {}, {}, {}, {}
local find, byte, floor = string.find, string.byte, math.floor
for j = 1, #ms do
  local i = 3 + (j - 1) * 6
  local m, dl, c = ms[j], ARGV[i+2], stored[j]
  -- The incident is the one claimed when its state starts with the claimed deadline and stateSep, or,
  -- as a claim committed it, is the bare deadline score (see decodeState).
  local bare = c and not find(c, ${stateSep}, 1, true)
  if not (c and ((not bare and find(c, dl, 1, true) == 1 and byte(c, #dl + 1) == ${stateSepByte}) or
      (bare and floor(tonumber(c) / ${MaxTypes}) == tonumber(dl)))) then
    out[j] = 0
  else
    out[j] = 1
    local op = ARGV[i]
    if op == 'X' then
      hdel[#hdel+1] = m
      unalarm[#unalarm+1] = m
      undead[#undead+1] = m
    else
      local st = ARGV[i+4]
      -- An operator's ack (the acked flag) made meanwhile is kept.
      if not bare and find(c, ${stateAckedPattern}) then
        st = (string.gsub(st, ${stateUnackedPattern}, ${stateSetAcked}))
      end
      hset[#hset+1] = m
      hset[#hset+1] = st
      if op == 'P' then
        unalarm[#unalarm+1] = m
        dead[#dead+1] = now
        dead[#dead+1] = m
      else
        local act, sc, drop = ARGV[i+3], scores[j], tonumber(ARGV[i+5])
        local sdl = sc and floor(tonumber(sc) / ${MaxTypes})
        if op == 'R' and sdl and drop > 0 and sdl == drop then
          -- A signal older than the incident's reported failure: its deadline goes.
          stale[#stale+1] = m
        elseif op == 'R' and sdl and sdl > tonumber(dl) then
          -- The device signalled since its claim: act now, so its recovery is reported.
          act = now
        end
        alarms[#alarms+1] = act
        alarms[#alarms+1] = m
      end
    end
  end
end
if #hdel > 0 then redis.call('HDEL', KEYS[3], unpack(hdel)) end
if #unalarm > 0 then redis.call('ZREM', KEYS[2], unpack(unalarm)) end
if #undead > 0 then redis.call('ZREM', KEYS[4], unpack(undead)) end
if #stale > 0 then redis.call('ZREM', KEYS[1], unpack(stale)) end
if #hset > 0 then
  hset[#hset+1] = ${stateGuardField}
  hset[#hset+1] = ${stateGuardValue}
  redis.call('HSET', KEYS[3], unpack(hset))
end
if #alarms > 0 then redis.call('ZADD', KEYS[2], unpack(alarms)) end
if #dead > 0 then redis.call('ZADD', KEYS[4], unpack(dead)) end
local released = {}
for r in string.gmatch(ARGV[2], ${packedItem}) do released[#released+1] = r end
pieces(released, 1, function(...)
  redis.call('ZREM', KEYS[2], ...)
  redis.call('HDEL', KEYS[5], ...)
end)
return out
`)

// maxAcksPerCall bounds one ackScript call: its lists (two values per ack) stay under maxUnpack, and a
// call blocks Redis for its whole length.
const maxAcksPerCall = 1000

// Record is an in-flight record (doc.go): the committed claims of one slot in one claim call.
// Claim.Record names it.
type Record struct {
	Slot int
	Name string
}

// RecordsOf returns the in-flight records of claims, each once: what Settle releases once the claims'
// events are out.
func RecordsOf(claims []Claim) []Record {
	var out []Record
	seen := map[Record]bool{}
	for _, c := range claims {
		if r := (Record{Slot: c.Slot, Name: c.Record}); c.Record != "" && !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	return out
}

// Acknowledge applies acks, one script call per slot, in one round trip. applied[i] reports whether
// acks[i] took effect (false: the incident had ended or been replaced meanwhile — not an error).
func (s *Store) Acknowledge(ctx context.Context, acks []Ack) (applied []bool, err error) {
	return s.Settle(ctx, acks, nil)
}

// Settle finishes a wake-up (doc.go): it applies acks as Acknowledge does, then releases records. A
// slot's acks and releases go in one script call, so a record is never released before the acks of the
// claims it leases; a slot with releases only costs two plain commands. Releasing a record whose lease
// ran out (it was handed out again) is a no-op, and so is, guarded, an ack the new holder overtook.
func (s *Store) Settle(ctx context.Context, acks []Ack, records []Record) (applied []bool, err error) {
	if len(acks) == 0 && len(records) == 0 {
		return nil, nil
	}
	now := s.now().UnixMilli()
	dormant := dormantScore(now)
	type group struct {
		args []any
		idx  []int
	}
	var groups []*group
	var slotOf []int                           // slotOf[k] = slot of groups[k]
	open := map[int]*group{}                   // slot → its group still taking acks
	last := make(map[string]*group, len(acks)) // device → the group of its latest ack
	for i, a := range acks {
		g := open[a.Slot]
		if g == nil || len(g.idx) == maxAcksPerCall || last[a.Device] == g {
			g = &group{args: []any{now, ""}}
			open[a.Slot] = g
			groups = append(groups, g)
			slotOf = append(slotOf, a.Slot)
		}
		last[a.Device] = g
		next := dormant
		if a.Op == Reschedule && !a.Dormant {
			next = strconv.FormatInt(a.Next.UnixMilli(), 10)
		}
		state := "" // a removal writes none
		if a.Op != Remove {
			state = a.State.encode()
		}
		g.args = append(g.args, string(a.Op), a.Device, a.Claimed, next, state, a.DropDeadline)
		g.idx = append(g.idx, i)
	}
	released := map[int][]string{} // slot → its records
	for _, r := range records {
		released[r.Slot] = append(released[r.Slot], r.Name)
	}
	for slot, names := range released {
		if g := open[slot]; g != nil {
			// The slot's last group runs after its others: its records go with it.
			g.args[1] = strings.Join(names, packSep)
			delete(released, slot)
		}
	}
	applied = make([]bool, len(acks))
	if len(groups) > 0 {
		calls := make([]scriptCall, len(groups))
		for k, g := range groups {
			slot := slotOf[k]
			calls[k] = scriptCall{Keys: []string{s.keys.Deadlines(slot), s.keys.alarms(slot), s.keys.state(slot), s.keys.dead(slot), s.keys.inFlight(slot)}, Args: g.args}
		}
		cmds, err := s.runAll(ctx, ackScript, calls)
		if err != nil {
			return nil, fmt.Errorf("deadline: acknowledge: %w", err)
		}
		for k, g := range groups {
			res, err := cmds[k].Int64Slice()
			if err != nil {
				return nil, fmt.Errorf("deadline: acknowledge slot %d: %w", slotOf[k], err)
			}
			for j, v := range res {
				applied[g.idx[j]] = v == 1
			}
		}
	}
	if err := s.releaseRecords(ctx, released); err != nil {
		return nil, err
	}
	return applied, nil
}

// releaseRecords drops the in-flight records of slots that had no acknowledgement to carry them: no
// script, one round trip.
func (s *Store) releaseRecords(ctx context.Context, released map[int][]string) error {
	if len(released) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	for slot, names := range released {
		members := make([]any, len(names))
		for i, n := range names {
			members[i] = n
		}
		pipe.ZRem(ctx, s.keys.alarms(slot), members...)
		pipe.HDel(ctx, s.keys.inFlight(slot), names...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("deadline: release in-flight records: %w", err)
	}
	return nil
}

// setAckedScript marks an open incident acknowledged by an operator, unless its device has signalled
// since (its recovery is under way: an `acked` then would follow the `recovered`). With a hold it also
// sets the act's announcement key, which keeps the incident's `recovered` back until the `acked` event
// is out (ActsPending).
//
// KEYS[1] state  KEYS[2] deadlines  KEYS[3] the device's announcement key
// ARGV[1] device  ARGV[2] hold (ms; 0: none)
// Reply: 1 when the device has an open incident and has not signalled since, 0 otherwise.
var setAckedScript = newScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return 0 end
local dl
if not string.find(cur, ${stateSep}, 1, true) then
  -- A bare deadline score: a committed incident, interrupted sent (see decodeState).
  local sc = tonumber(cur)
  dl = math.floor(sc / ${MaxTypes})
  cur = string.format(${stateCommittedFormat}, dl, sc - dl * ${MaxTypes}, dl)
else
  dl = tonumber(string.match(cur, ${stateDeadlinePattern}))
end
local back = redis.call('ZSCORE', KEYS[2], ARGV[1])
if back and math.floor(tonumber(back) / ${MaxTypes}) > dl then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], (string.gsub(cur, ${stateUnackedPattern}, ${stateSetAcked})))
if tonumber(ARGV[2]) > 0 then redis.call('SET', KEYS[3], '1', 'PX', ARGV[2]) end
return 1
`)

// SetAcked records an operator's acknowledgement: the alarm loop sends no more repeats for the open
// incident, but still reports recovery. It returns false when the device has no open incident, or has
// signalled since it opened. A positive hold keeps the incident's `recovered` back for at most that long,
// until ActAnnounced says the `acked` event went out, so a consumer never reads it after the recovery.
func (s *Store) SetAcked(ctx context.Context, device string, hold time.Duration) (bool, error) {
	for _, slot := range s.slotsOf(device) {
		n, err := setAckedScript.Run(ctx, s.rdb, []string{s.keys.state(slot), s.keys.Deadlines(slot), s.keys.acting(slot, device)},
			device, hold.Milliseconds()).Int()
		if err != nil {
			return false, fmt.Errorf("deadline: ack %q: %w", device, err)
		}
		if n == 1 {
			return true, nil
		}
	}
	return false, nil
}

// ActAnnounced ends the hold SetAcked put on device's recovery: its `acked` event is out, or will not be.
func (s *Store) ActAnnounced(ctx context.Context, device string) error {
	keys := make([]string, 0, 2)
	for _, slot := range s.slotsOf(device) {
		keys = append(keys, s.keys.acting(slot, device))
	}
	if err := s.rdb.Del(ctx, keys...).Err(); err != nil {
		return fmt.Errorf("deadline: ack %q announced: %w", device, err)
	}
	return nil
}

// ActsPending reports, for each claim, whether an operator's ack of its device is still being announced
// (SetAcked's hold): its `recovered` waits for the `acked` event.
func (s *Store) ActsPending(ctx context.Context, claims []Claim) ([]bool, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(claims))
	for i, c := range claims {
		cmds[i] = pipe.Exists(ctx, s.keys.acting(c.Slot, c.Device))
	}
	if _, err := pipe.Exec(ctx); err != nil { // EXISTS answers 0, never nil
		return nil, fmt.Errorf("deadline: acts pending: %w", err)
	}
	pending := make([]bool, len(claims))
	for i, cmd := range cmds {
		pending[i] = cmd.Val() > 0
	}
	return pending, nil
}

// slotsOf returns the device's slot and, while a doubling settles, its old slot.
func (s *Store) slotsOf(device string) []int {
	l := s.Layout()
	slots := []int{Slot(device, l.Slots)}
	if old, moved := l.OldSlot(device); moved {
		slots = append(slots, old)
	}
	return slots
}

// Delete stops monitoring device (decommissioned): no event follows. It returns false when the device
// was not known.
func (s *Store) Delete(ctx context.Context, device string) (bool, error) {
	found, err := s.deleteMany(ctx, []string{device})
	if err != nil {
		return false, err
	}
	return found[0], nil
}

// deleteMany is Delete of each device, in one round trip whatever their number (one more in a fleet
// with parents, three more when a parent is named no more, and one when an own timeout goes). found[i]
// is false when devices[i] was not known.
// Every key family that holds a device (docs/concepts.md, "Slot layout") loses it here, its parent's
// children set included; a deleted device that was a parent stays named only while its children still
// name it.
func (s *Store) deleteMany(ctx context.Context, devices []string) (found []bool, err error) {
	if len(devices) == 0 {
		return nil, nil
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("deadline: delete %q (of %d devices): %w", devices[0], len(devices), err)
		}
	}()
	// Their parents' children sets lose them too (unlink, below), or retention's deletes would grow those
	// sets for good.
	parentsUsed, err := s.links.Used(ctx)
	if err != nil {
		return nil, err
	}
	cmds := make([][]*redis.IntCmd, len(devices))
	links := make([]parents.Write, len(devices))
	ownTimeouts := make([]*redis.IntCmd, len(devices))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, device := range devices {
			for _, slot := range s.slotsOf(device) {
				cmds[i] = append(cmds[i],
					p.ZRem(ctx, s.keys.Deadlines(slot), device),
					p.ZRem(ctx, s.keys.alarms(slot), device),
					p.HDel(ctx, s.keys.state(slot), device),
					p.ZRem(ctx, s.keys.dead(slot), device))
				p.HDel(ctx, s.keys.causes(slot), device)                        // not counted: only kept beside the above
				p.ZRem(ctx, s.keys.seen(slot), device, incidentSeenMark+device) // not counted: only kept beside the above
				s.flaps.QueueDelete(ctx, p, slot, device)                       // not counted: only kept beside the above
			}
			// Its registration, parent link and own timeout go with it; none of them counts as found.
			s.registry.QueueDelete(ctx, p, device)
			links[i] = s.links.QueueLink(ctx, p, device, "")
			ownTimeouts[i] = s.overrides.QueueRemove(ctx, p, device)
		}
		// Replicas remembering their types forget them: a device of the same name starts afresh.
		s.typeMem.QueueRetyped(ctx, p, devices)
		return nil
	})
	for _, device := range devices {
		s.links.Forget(device)
	}
	s.typeMem.Forget(devices)
	if err != nil {
		return nil, err
	}
	var asParents []string // a deleted parent without children is named no more
	if parentsUsed {
		asParents = devices
	}
	if err := s.links.Unlink(ctx, links, asParents); err != nil {
		return nil, err
	}
	if slices.ContainsFunc(ownTimeouts, func(c *redis.IntCmd) bool { return c.Val() > 0 }) {
		// Only a removed own timeout makes every replica reread the overrides table.
		if err := s.overrides.Changed(ctx); err != nil {
			return nil, err
		}
	}
	found = make([]bool, len(devices))
	for i := range devices {
		for _, c := range cmds[i] {
			found[i] = found[i] || c.Val() > 0
		}
	}
	return found, nil
}
