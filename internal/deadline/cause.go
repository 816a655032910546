package deadline

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Causes of an incident other than silence (docs/events.md): the device reported a failure, or its broker
// said it went offline. An incident without a cause began with silence.
const (
	CauseReported = "reported"
	CauseOffline  = "offline"
)

// Cause is why an incident began when it was not silence. It belongs to the incident whose deadline is
// Deadline: a later incident of the same device began with silence again.
type Cause struct {
	Kind     string // CauseReported or CauseOffline
	Reason   string // the device's own words (reported failures); may be empty
	Deadline int64  // ms: the moved deadline, which identifies the incident
	// LastSeen is the device's last signal before the incident: for a reported failure the failure
	// itself (the device spoke then), for offline its last signal before the broker's message.
	LastSeen time.Time
}

// causeSep separates the fields of a stored cause: deadline, last seen, kind, reason. The reason comes
// last, so it may hold the separator itself.
const causeSep = ":"

// decodeCause reads a stored cause; ok is false for one that is not well formed (it is then ignored).
func decodeCause(v string) (Cause, bool) {
	f := strings.SplitN(v, causeSep, 4)
	if len(f) != 4 {
		return Cause{}, false
	}
	dl, err1 := strconv.ParseInt(f[0], 10, 64)
	seen, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return Cause{}, false
	}
	return Cause{Kind: f[2], Reason: f[3], Deadline: dl, LastSeen: time.UnixMilli(seen)}, true
}

// Mark moves one device's deadline earlier, with a cause (MarkEarlier).
type Mark struct {
	Device string
	// Type is the type of a device Redis does not know yet, for a failure it reports itself ("" = the
	// default type); ignored for a broker's word (Own false).
	Type string
	// At is the message's time: a device whose last signal is later was heard from since, and is not marked.
	At time.Time
	// Deadline is the earlier deadline: the failure's time, or an offline message's receipt + grace.
	Deadline time.Time
	Cause    string // CauseReported or CauseOffline
	Reason   string
	// Own: the device's own word (a reported failure). It counts as the device's last signal, and a
	// device Redis does not know is added, due at Deadline. A broker's word (presence) never adds one.
	Own bool
}

// MarkResult says what MarkEarlier did with one mark.
type MarkResult int

const (
	// MarkMoved: the deadline is now the mark's, and the incident will carry its cause.
	MarkMoved MarkResult = iota
	// MarkLate: the device signalled after the mark's time; nothing changed.
	MarkLate
	// MarkNotEarlier: the device's deadline is already no later than the mark's; nothing changed.
	MarkNotEarlier
	// MarkOpen: the device is already interrupted; nothing changed (its repeats follow its policy).
	MarkOpen
	// MarkUnknown: a broker's word about a device Redis does not know; nothing was created.
	MarkUnknown
)

// markEarlierScript moves deadlines earlier: the write ordinary signals never make (their ZADD GT only
// moves forward), guarded here against out-of-order messages. One call serves a whole batch on a
// standalone Redis (a call's fixed cost is most of a mark's), one slot on Redis Cluster.
//
// KEYS: sextuples per slot in the call: deadlines, state, causes, seen, reported, alarms
// ARGV[1] lead (ms) per type index, listSep-separated (its timeout, or its warn_after: Store.lead);
// negative for a type with expected times, whose last signal is in seen
// then sextuples: key sextuple number (1-based), device, message time (ms), new deadline (ms), type index
// for the device's own word (-1: a broker's word), cause text (kind:reason)
// Reply: one MarkResult per mark.
//
// The device's last signal is its deadline minus its type's lead, the way alarm.Decide reads it; a
// message older than it changes nothing. A device with an open incident (no deadline, a state) is left to
// its policy, except one reported only `late`: the word interrupts it now, with its cause. A device's own
// failure that moved its deadline is also put in reported (Keyspace.reported).
var markEarlierScript = newScript(`
local floor = math.floor
local timeouts = {}
for v in string.gmatch(ARGV[1], ${listItem}) do timeouts[#timeouts+1] = tonumber(v) end
-- An incident reported only late, waiting for its interruption at its alarm entry's score: the mark's
-- word interrupts it now instead, under the mark's deadline and cause (the state's deadline is rewritten,
-- so an acknowledgement already under way for the old one is refused). Any other open incident, or one
-- whose entry is leased, is left to its policy.
local function lateToNow(K, m, st, at, dl, own, cause)
  local sdl, t, acked, due, rest = string.match(st, ${stateLatePattern})
  if not sdl or tonumber(redis.call('ZSCORE', K[6], m)) ~= tonumber(due) then return ${MarkOpen} end
  local to = timeouts[tonumber(t) + 1] or timeouts[1] or 0
  local last = tonumber(sdl) - to
  if to < 0 then last = tonumber(redis.call('ZSCORE', K[4], m)) or tonumber(sdl) end
  if last > at then return ${MarkLate} end
  if dl >= tonumber(due) then return ${MarkNotEarlier} end
  if own >= 0 then last = at end
  local d = string.format('%.0f', dl)
  redis.call('HSET', K[2], m, d .. ${stateSep} .. t .. ${stateSep} .. '0' .. ${stateSep} .. acked .. ${stateSep} ..
    ${holdFieldLate} .. ${stateSep} .. d .. ${stateSep} .. rest)
  redis.call('ZADD', K[6], 'XX', d, m)
  redis.call('HSET', K[3], m, d .. ${causeSep} .. string.format('%.0f', last) .. ${causeSep} .. cause)
  return ${MarkMoved}
end
local out, groups = {}, {}
for i = 2, #ARGV, 6 do
  local K = groups[ARGV[i]]
  if not K then
    local b = (tonumber(ARGV[i]) - 1) * 6
    K = {KEYS[b+1], KEYS[b+2], KEYS[b+3], KEYS[b+4], KEYS[b+5], KEYS[b+6]}
    groups[ARGV[i]] = K
  end
  local m, at, dl, own, cause = ARGV[i+1], tonumber(ARGV[i+2]), tonumber(ARGV[i+3]), tonumber(ARGV[i+4]), ARGV[i+5]
  local r
  local cur = redis.call('ZSCORE', K[1], m)
  if not cur then
    local st = redis.call('HGET', K[2], m)
    if st then
      r = lateToNow(K, m, st, at, dl, own, cause)
    elseif own < 0 then
      r = ${MarkUnknown}
    else
      redis.call('ZADD', K[1], 'NX', string.format('%.0f', dl * ${MaxTypes} + own), m)
      redis.call('HSET', K[3], m, string.format('%.0f', dl) .. ${causeSep} .. string.format('%.0f', at) .. ${causeSep} .. cause)
      redis.call('ZADD', K[5], dl, m)
      r = ${MarkMoved}
    end
  else
    local s = tonumber(cur)
    local cdl = floor(s / ${MaxTypes})
    local t = s - cdl * ${MaxTypes}
    local to = timeouts[t + 1] or timeouts[1] or 0
    local last = cdl - to
    if to < 0 then last = tonumber(redis.call('ZSCORE', K[4], m)) or cdl end
    if last > at then
      r = ${MarkLate}
    elseif dl >= cdl then
      r = ${MarkNotEarlier}
    else
      if own >= 0 then last = at end
      redis.call('ZADD', K[1], 'XX', string.format('%.0f', dl * ${MaxTypes} + t), m)
      redis.call('HSET', K[3], m, string.format('%.0f', dl) .. ${causeSep} .. string.format('%.0f', last) .. ${causeSep} .. cause)
      if own >= 0 then redis.call('ZADD', K[5], dl, m) else redis.call('ZREM', K[5], m) end
      r = ${MarkMoved}
    end
  end
  out[#out+1] = r
end
return out
`)

// MarkEarlier moves each mark's device's deadline earlier, to the mark's, and records its cause for the
// incident that follows (docs/signals.md: reported failures, presence). Ordinary signals never take this
// path: they stay one ZADD GT. It returns once Redis stored the marks, one result per mark, in one round
// trip (one script call, one per slot on Redis Cluster).
//
// During a slot doubling a device whose entry is still in its old slot is not found (MarkUnknown, or a
// failure adds it to the new slot); its silence is still detected at its deadline.
func (s *Store) MarkEarlier(ctx context.Context, marks []Mark) ([]MarkResult, error) {
	if len(marks) == 0 {
		return nil, nil
	}
	table, _ := s.untypedTable()
	timeouts := table.render(millis)
	slots := s.Slots()
	calls := s.newSlotCalls(func(slot int) []string {
		return []string{s.keys.Deadlines(slot), s.keys.state(slot), s.keys.causes(slot), s.keys.seen(slot),
			s.keys.reported(slot), s.keys.alarms(slot)}
	}, timeouts)
	var order [][]int // per call: the marks' indexes in its order
	for i, mk := range marks {
		own := -1
		if mk.Own {
			t, err := s.ownTypeIndex(ctx, mk)
			if err != nil {
				return nil, err
			}
			own = t
		}
		ci := calls.add(Slot(mk.Device, slots), mk.Device, mk.At.UnixMilli(), mk.Deadline.UnixMilli(), own, mk.Cause+causeSep+mk.Reason)
		if ci == len(order) {
			order = append(order, nil)
		}
		order[ci] = append(order[ci], i)
	}
	cmds, err := s.runAll(ctx, markEarlierScript, calls.calls)
	if err != nil {
		return nil, fmt.Errorf("deadline: mark earlier: %w", err)
	}
	out := make([]MarkResult, len(marks))
	for ci, cmd := range cmds {
		vals, err := cmd.Int64Slice()
		if err != nil || len(vals) != len(order[ci]) {
			return nil, fmt.Errorf("deadline: mark earlier: reply %v: %v", cmd.Val(), err)
		}
		for k, i := range order[ci] {
			out[i] = MarkResult(vals[k])
		}
	}
	return out, nil
}

// ownTypeIndex is the type index a device's own mark is recorded under if Redis does not know it: its
// registered own timeout's, else the type it names (the default type's for a name not configured).
func (s *Store) ownTypeIndex(ctx context.Context, mk Mark) (int, error) {
	sig := []Signal{{Device: mk.Device, Type: mk.Type}}
	s.applyOverrides(sig)
	r, err := s.resolve(ctx, sig[0].Type)
	return r.idx, err
}

// attachCauses gives each claim of one slot the cause stored for its incident, from the claim script's
// flat pairs (device, stored cause); a cause of another incident of the device is not its.
func attachCauses(claims []Claim, causes []string) {
	if len(causes) == 0 {
		return
	}
	byDevice := make(map[string]string, len(causes)/2)
	for j := 0; j+1 < len(causes); j += 2 {
		byDevice[causes[j]] = causes[j+1]
	}
	for i := range claims {
		v, ok := byDevice[claims[i].Device]
		if !ok {
			continue
		}
		claims[i].Cause = causeOfIncident(v, claims[i].State.Deadline)
	}
}

// causeOfIncident is the stored cause when it is the incident's whose deadline (ms) is given, else nil: a
// cause of the device's earlier incident is not this one's.
func causeOfIncident(stored string, deadline int64) *Cause {
	if c, ok := decodeCause(stored); ok && c.Deadline == deadline {
		return &c
	}
	return nil
}

// fillCauses gives each device with an open incident the cause stored for that incident, in one round
// trip, each in slotOf(its index); nothing when none has an incident.
func (s *Store) fillCauses(ctx context.Context, devices []Device, slotOf func(i int) int) error {
	bySlot := map[int][]int{}
	for i, d := range devices {
		if d.Incident != nil {
			slot := slotOf(i)
			bySlot[slot] = append(bySlot[slot], i)
		}
	}
	if len(bySlot) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make(map[int]*redis.SliceCmd, len(bySlot))
	for slot, which := range bySlot {
		ids := make([]string, len(which))
		for k, i := range which {
			ids[k] = devices[i].ID
		}
		cmds[slot] = pipe.HMGet(ctx, s.keys.causes(slot), ids...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("deadline: causes: %w", err)
	}
	for slot, which := range bySlot {
		for k, v := range cmds[slot].Val() {
			stored, ok := v.(string)
			if !ok {
				continue
			}
			d := &devices[which[k]]
			d.Cause = causeOfIncident(stored, d.Incident.Deadline)
		}
	}
	return nil
}

// reportedFailuresLua is where a claim's fresh step begins (claimsteps.go): the reported failures of a
// slot and their put-back, defined here beside the rest of causes. It reads the claim steps' locals (now,
// batch, floor, pieces) and their KEYS and ARGV.
const reportedFailuresLua = `-- (0) Reported failures whose deadline passed (KEYS[6], cause.go), looked at before the deadlines are
-- claimed: a failure that a signal no newer than it moved on (a replay, or a heartbeat overtaken on its
-- way) is put back, since the device said it failed after that signal; a newer signal ended it, and a
-- claimed one is done with. The pending ones stay: those heard after a window are the held step's.
local function reportedFailures()
  if redis.call('EXISTS', KEYS[6]) == 0 then return end
  local leads
  local done = {}
  local entries = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, batch, 'WITHSCORES')
  for i = 1, #entries, 2 do
    local m, f = entries[i], tonumber(entries[i+1])
    local cur = redis.call('ZSCORE', KEYS[1], m)
    local pending = false
    if cur then
      local s = tonumber(cur)
      local cdl = floor(s / ${MaxTypes})
      local t = s - cdl * ${MaxTypes}
      if cdl ~= f then
        if not leads then
          leads = {}
          for v in string.gmatch(ARGV[9], ${listItem}) do leads[#leads+1] = tonumber(v) end
        end
        local lead = leads[t + 1] or leads[1] or 0
        local last = cdl - lead
        if lead < 0 then last = tonumber(redis.call('ZSCORE', KEYS[7], m)) or cdl end
        if last <= f then
          redis.call('ZADD', KEYS[1], 'XX', string.format('%.0f', f * ${MaxTypes} + t), m)
          cdl = f
        end
      end
      pending = cdl == f
    end
    if not pending then done[#done+1] = m end
  end
  pieces(done, 1, function(...) redis.call('ZREM', KEYS[6], ...) end)
end
`
