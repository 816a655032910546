package deadline

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Claim is one device handed to the alarm loop (doc.go: claim, lease, commit).
type Claim struct {
	Device string
	Slot   int
	Type   string // its configured type
	// OwnTimeout is the device's own timeout when it was registered with one (0: its type's); its
	// policy is its type's with that timeout (config.Policy.WithOwnTimeout).
	OwnTimeout time.Duration
	State      State // the incident as stored; State.Deadline identifies it
	// Fresh is true when the deadline just passed (claimed from the deadlines set), false when the alarm
	// entry came due (a repeat, a redelivery after a lease, or a recovery probe).
	Fresh bool
	// Replaced is, on the fresh claim that began this incident, the earlier incident of the same device
	// that was still open: the device signalled and fell silent again before it was settled. The
	// recovery it may owe is in State.Owed, which outlives this claim; Replaced is only what to put back
	// should the claim be undone (layout.go).
	Replaced *State
	// Record names the in-flight record of a committed claim, "" on others. State is handed out as
	// nothing sent yet, though Redis already holds the committed outcome; releasing the record settles it.
	Record string
	// CommittedRepeat is the repeat interval the committed next act was computed with (0: dormant), so
	// alarm.Decide can tell whether the commit stands under the policy in force.
	CommittedRepeat time.Duration
	// CommittedSuppression: its down parent's wake committed `suppressed` for this waiting child
	// (wake.go). Like any committed claim's, State is handed out as nothing sent yet. WokenBy is that
	// parent when the claim knows it ("" for a record handed out again).
	CommittedSuppression bool
	WokenBy              string
	// HeldBack: a deferred incident (late, past a quiet interval, after its parent's recovery) whose
	// interruption the hold-back does not allow yet (warn.go, holdDeferredBack).
	HeldBack bool
	// Cause is why the incident began when it was not silence (a reported failure, offline); nil: silence.
	Cause *Cause
	// LastSignal is the device's last signal before the incident when its deadline was written under
	// another timeout than its type's now (a reload, a new own timeout; typeidentity.go); zero otherwise,
	// when it is the deadline less the policy's lead.
	LastSignal time.Time
}

// HandedOutAgain reports whether c comes from an in-flight record whose lease ran out (its replica died,
// or lost Redis, before releasing it): what it committed may have been published, or not. A wake's own
// suppression claims name their parent (WokenBy); a claim's own commits are fresh.
func (c Claim) HandedOutAgain() bool { return c.Record != "" && !c.Fresh && c.WokenBy == "" }

// ClaimResult is what one wake-up found.
type ClaimResult struct {
	Claims []Claim
	// More is true when a slot returned a full batch: claim again at once.
	More bool
	// NextDeadline is the earliest deadline left in the claimed slots that a claim may take once it is
	// due: while hold-back holds some types, the first after now of a type it does not hold, and zero
	// while it holds every type (a watermark that moves on by itself). NextAlarm is the earliest due
	// alarm entry. Zero when none.
	NextDeadline, NextAlarm time.Time
	// SlotNext is, per claimed slot in the order given, the earlier of the two in that slot, the claim's
	// own time when that slot returned a full batch, or zero when neither is known: the scanner sleeps
	// until the earliest instead of polling, and claims only the slots due (scanner.go, slotSchedule).
	SlotNext []time.Time
}

// claimScript claims up to batch due devices of one slot, in four sections: (1) fresh claims, (2) due
// alarm entries, (3) the in-flight record, (4) the next due scores.
//
// KEYS[1] deadlines  KEYS[2] alarms  KEYS[3] state  KEYS[4] in-flight records  KEYS[5] causes
// KEYS[6] reported  KEYS[7] seen
// ARGV[1] now (ms)  ARGV[2] watermark (ms): only deadlines ≤ it are claimed (hold-back)
// ARGV[3] lease (ms)  ARGV[4] batch  ARGV[5] the record of this call's committed claims
// ARGV[6] a committed claim's next act per type index (now + its repeat interval, or a dormant score),
// listSep-separated, or one value for every type
// ARGV[7] the watermark (ms) per type index, listSep-separated, where types differ (hold-back after a
// blind window: each device waits its own timeout); "" when ARGV[2] holds for every type. An index
// past the list gets ARGV[2].
// ARGV[8] "from,to" (ms): a reported failure whose deadline is within them is claimed past its type's
// watermark (ClaimOptions.HeardAfter); "" when hold-back holds nobody back after a window.
// ARGV[9] lead (ms) per type index, listSep-separated, as MarkEarlier takes it (negative: a type with
// expected times, whose last signal is in seen).
// Reply: {next deadline ms or -1, next alarm ms or -1, more 0/1, committed, again, replacing, due,
// causes}, where committed and again are flat pairs packed into one packSep-separated string: the
// committed fresh claims (device, deadlines-set score) and the claims of expired records handed out again
// (device, score or a suppression's committed state, wake.go);
// replacing is flat triples (device, deadlines-set score, replaced state); due is flat pairs (device,
// state); causes flat pairs (device, stored cause) of the claimed devices that have one.
//
// A plain fresh claim is committed (doc.go). A fresh claim whose device has an open incident replaces it
// when its deadline is newer: it gets a full state with nothing sent and a leased alarm entry, and the
// alarm loop acknowledges it per device; an older deadline is a replayed old signal and is dropped. Every
// reply element costs Redis more than the Lua around it, so committed claims go back packed into one
// string, and claimed members leave the deadlines set by rank, not by name.
var claimScript = newScript(`
${luaPieces}
local now, wm, lease, batch = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local record, actsByType, wmByType = ARGV[5], ARGV[6], ARGV[7]
local floor, byte = math.floor, string.byte
-- Formatted once: Redis turns a Lua number into text with %.17g for every element.
local leased = string.format('%.0f', now + lease)

-- The highest score due by watermark w (ms) for every type.
local function dueBy(w) return string.format('%.0f', w * ${MaxTypes} + ${MaxTypes} - 1) end

-- The watermarks per type index (index + 1; ARGV[7]) and the latest of them or of the common one.
local wms, high = {}, wm
for v in string.gmatch(wmByType, ${listItem}) do
  local x = tonumber(v)
  wms[#wms+1] = x
  if x > high then high = x end
end

-- Past the common watermark, the members of types whose own watermark is later (ARGV[7]) are due too:
-- appended to due (flat pairs) up to batch in all. Members of types still held are stepped over, at most
-- batch × ${heldScanFactor} of them a call. Returns the members appended, to be removed by name.
local function pastWatermark(due)
  local byName = {}
  if #due / 2 >= batch or high <= wm then return byName end
  -- Read only what can fill the batch, then past the held members read, up to the scan bound: most
  -- often nothing between the watermarks is held, and one read of what is needed fills it.
  local offset, bound = 0, batch * ${heldScanFactor}
  while #due / 2 < batch and offset < bound do
    local want = math.min(batch - #due / 2, bound - offset)
    local past = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. dueBy(wm), dueBy(high), 'LIMIT', offset, want, 'WITHSCORES')
    for i = 1, #past, 2 do
      local s = tonumber(past[i+1])
      if floor(s / ${MaxTypes}) <= (wms[s % ${MaxTypes} + 1] or wm) then
        due[#due+1] = past[i]
        due[#due+1] = past[i+1]
        byName[#byName+1] = past[i]
      end
    end
    if #past / 2 < want then break end
    offset = offset + want
  end
  return byName
end

-- What a fresh incident replacing prev (deadline pdl) owes: prev's recovery when prev was reported, else
-- what prev owed (State.owing). Returns the owed deadline and the warned flag, as text.
local function owing(prev, pdl)
  if not string.find(prev, ${stateSep}, 1, true) then return string.format('%.0f', pdl), '0' end
  local next, hold = string.match(prev, ${stateNextPattern}), string.match(prev, ${stateHoldPattern})
  if next ~= '0' then return string.format('%.0f', pdl), '0' end
  if hold == ${holdFieldLate} then return string.format('%.0f', pdl), '1' end
  return string.match(prev, ${stateOwedPattern}) or '0', string.match(prev, ${stateOwedWarnedPattern}) or '0'
end

` + reportedFailuresLua + `
-- (1) Fresh claims: up to batch members of the deadlines set due by the watermark, then by their type's,
-- then reported failures heard since the blind windows (0). Returns the committed claims (flat pairs), the
-- replacing ones (flat triples) and how many members were due.
local function claimFresh()
  local committed, replacing = {}, {}
  local heard = reportedFailures()
  local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', dueBy(wm), 'LIMIT', 0, batch, 'WITHSCORES')
  local byRank = #due / 2
  local byName = pastWatermark(due)
  for i = 1, #heard, 2 do
    if #due / 2 >= batch then break end
    due[#due+1] = heard[i]
    due[#due+1] = heard[i+1]
    byName[#byName+1] = heard[i]
  end
  local n = #due / 2
  if n == 0 then return committed, replacing, 0 end
  local acts = {}
  for v in string.gmatch(actsByType, ${listItem}) do acts[#acts+1] = v end
  local uniform = #acts == 1 and acts[1]
  local members, hset, zadd = {}, {}, {}
  for i = 1, #due, 2 do members[#members+1] = due[i] end
  local open = gather(members, function(...) return redis.call('HMGET', KEYS[3], ...) end)
  for i = 1, #due, 2 do
    local m, sc = due[i], due[i+1]
    local prev = open[(i + 1) / 2]
    if not prev then
      -- Commit: the state is the bare score, the alarm entry the next act.
      committed[#committed+1] = m
      committed[#committed+1] = sc
      hset[#hset+1] = m
      hset[#hset+1] = sc
      zadd[#zadd+1] = uniform or acts[floor(tonumber(sc) % ${MaxTypes}) + 1] or acts[1]
      zadd[#zadd+1] = m
    else
      -- An open incident: a full state starts with its deadline, a committed one is its bare score.
      local pdl = tonumber(string.match(prev, ${stateDeadlinePattern})) or floor(tonumber(prev) / ${MaxTypes})
      local s = tonumber(sc)
      local dl = floor(s / ${MaxTypes})
      if pdl < dl then
        replacing[#replacing+1] = m
        replacing[#replacing+1] = sc
        replacing[#replacing+1] = prev
        hset[#hset+1] = m
        hset[#hset+1] = string.format(${stateReplacingFormat}, dl, s - dl * ${MaxTypes}, owing(prev, pdl))
        zadd[#zadd+1] = leased
        zadd[#zadd+1] = m
      end
    end
  end
  if byRank > 0 then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, byRank - 1) end
  pieces(byName, 1, function(...) redis.call('ZREM', KEYS[1], ...) end)
  if #hset > 0 then
    hset[#hset+1] = ${stateGuardField}
    hset[#hset+1] = ${stateGuardValue}
    pieces(hset, 2, function(...) redis.call('HSET', KEYS[3], ...) end)
    pieces(zadd, 2, function(...) redis.call('ZADD', KEYS[2], ...) end)
  end
  return committed, replacing, n
end

-- An expired in-flight record: its claims whose state is still as committed go to again (flat pairs).
local function handOutAgain(expired, again)
  local data = redis.call('HGET', KEYS[4], expired)
  redis.call('HDEL', KEYS[4], expired)
  if not data then return end
  local devs, scores = {}, {}
  for d, s in string.gmatch(data, ${packedPair}) do
    devs[#devs+1] = d
    scores[#scores+1] = s
  end
  if #devs == 0 then return end
  local cur = gather(devs, function(...) return redis.call('HMGET', KEYS[3], ...) end)
  for k = 1, #devs do
    if cur[k] == scores[k] then
      again[#again+1] = devs[k]
      again[#again+1] = scores[k]
    end
  end
end

-- The slot's in-flight records (name, packed list), read before any is handed out again in this call,
-- when a due entry may need them (readRecords).
local records = {}
-- committedForm: st may be a state committed under a record: a bare score, or a suppression (wake.go).
local function committedForm(st)
  return not string.find(st, ${stateSep}, 1, true) or string.find(st, ${stateSuppressedPattern})
end
local function readRecords(states)
  if redis.call('EXISTS', KEYS[4]) == 0 then return end
  for _, st in pairs(states) do
    if st and committedForm(st) then
      records = redis.call('HGETALL', KEYS[4])
      return
    end
  end
end

-- inFlightUntil: a due entry whose state is still as a claim committed it may belong to a record still
-- in flight (its process slow or dead before publishing); then it returns when to look again: when that
-- record's lease ends (now + 1 ms when the record is handed out again in this very call), or sooner,
-- ${inFlightRecheck} ms on, as a live process releases its record within milliseconds; else nil.
local function inFlightUntil(m, st)
  if #records == 0 or not committedForm(st) then return nil end
  local pair = ${packSep} .. m .. ${packSep} .. st .. ${packSep}
  for i = 1, #records, 2 do
    if string.find(${packSep} .. records[i+1] .. ${packSep}, pair, 1, true) then
      local ends = tonumber(redis.call('ZSCORE', KEYS[2], records[i]))
      return math.min(math.max(ends or now, now), now + ${inFlightRecheck}) + 1
    end
  end
  return nil
end

-- (2) Due alarm entries, up to left: leased again and returned with their state. An entry without a state
-- is removed: an orphan, or an expired record. Returns the entries (flat pairs), the claims handed out
-- again (flat pairs) and whether left entries were due.
local function claimDue(left)
  local entries, again = {}, {}
  if left <= 0 then return entries, again, false end
  local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, left)
  if #due == 0 then return entries, again, false end
  -- One read and one write per kind, as for fresh claims: a recovery wave makes many entries due at once.
  local states = gather(due, function(...) return redis.call('HMGET', KEYS[3], ...) end)
  readRecords(states)
  local lease, orphans = {}, {}
  for j, m in ipairs(due) do
    local st = states[j]
    local waitsTo = st and inFlightUntil(m, st)
    if waitsTo then
      -- Committed by a claim whose record is still in flight: whether its interrupted went out is known
      -- only when the record is released or handed out again, so it waits for that.
      lease[#lease+1] = string.format('%.0f', waitsTo)
      lease[#lease+1] = m
    elseif st then
      lease[#lease+1] = leased
      lease[#lease+1] = m
      entries[#entries+1] = m
      entries[#entries+1] = st
    else
      orphans[#orphans+1] = m
      if byte(m, 1) == ${recordMarkByte} then handOutAgain(m, again) end
    end
  end
  pieces(lease, 2, function(...) redis.call('ZADD', KEYS[2], ...) end)
  pieces(orphans, 1, function(...) redis.call('ZREM', KEYS[2], ...) end)
  return entries, again, #due == left
end

-- (3) The in-flight record leasing this call's committed claims and those handed out again (their device
-- and what each claim committed). Returns the two lists packed.
local function leaseRecord(committed, again)
  if #committed + #again == 0 then return '', '' end
  local c, a = table.concat(committed, ${packSep}), table.concat(again, ${packSep})
  local all = c
  if c == '' then all = a elseif a ~= '' then all = c .. ${packSep} .. a end
  redis.call('HSET', KEYS[4], record, all)
  redis.call('ZADD', KEYS[2], leased, record)
  return c, a
end

-- (4) The earliest deadline a claim may take once it is due, and the earliest act, left in the slot (-1:
-- none), so the scanner sleeps until then. While hold-back holds some types, that deadline is the first
-- after now of a type it does not hold, among the next ${nextScanBound} members; while it holds every type, or
-- those members are all held, there is none and the scanner polls (detection.max_idle_wait).
local function nextDeadline()
  if high < now then return -1 end
  if #wms == 0 then
    local d = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    if d[2] then return floor(tonumber(d[2]) / ${MaxTypes}) end
    return -1
  end
  -- Members at or before now are held, or left to the next claim (more): the next one due is after now.
  -- Most often it is of a type not held, so one member is read before the rest.
  local offset, want = 0, 1
  while offset < ${nextScanBound} do
    local after = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. dueBy(now), '+inf', 'LIMIT', offset, want, 'WITHSCORES')
    for i = 2, #after, 2 do
      local s = tonumber(after[i])
      if (wms[s % ${MaxTypes} + 1] or wm) >= now then return floor(s / ${MaxTypes}) end
    end
    if #after / 2 < want then return -1 end
    offset, want = offset + want, ${nextScanBound} - offset - want
  end
  return -1
end
local function nextDue()
  local na = -1
  local a = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if a[2] then
    local v = tonumber(a[2])
    if v and v < ${DormantAfter} then na = v end -- a dormant entry is never due
  end
  return nextDeadline(), na
end

-- (5) The causes of the claimed incidents that did not begin with silence (cause.go), read only in a slot
-- that has any, so a fleet without them pays nothing more: flat pairs device, cause. A fresh claim's
-- cause of an earlier incident is dropped.
local function causesOf(committed, replacing, again, due)
  if #committed + #replacing + #again + #due == 0 or redis.call('EXISTS', KEYS[5]) == 0 then return {} end
  local devs, fresh = {}, {}
  for i = 1, #committed, 2 do
    devs[#devs+1] = committed[i]
    fresh[#devs] = committed[i+1]
  end
  for i = 1, #replacing, 3 do
    devs[#devs+1] = replacing[i]
    fresh[#devs] = replacing[i+1]
  end
  for i = 1, #again, 2 do devs[#devs+1] = again[i] end
  for i = 1, #due, 2 do devs[#devs+1] = due[i] end
  local vals = gather(devs, function(...) return redis.call('HMGET', KEYS[5], ...) end)
  local out, stale = {}, {}
  for k, d in ipairs(devs) do
    local v = vals[k]
    if v then
      local sc = fresh[k]
      if sc and tonumber(string.match(v, '^%d+')) ~= floor(tonumber(sc) / ${MaxTypes}) then
        stale[#stale+1] = d
      else
        out[#out+1] = d
        out[#out+1] = v
      end
    end
  end
  pieces(stale, 1, function(...) redis.call('HDEL', KEYS[5], ...) end)
  return out
end

local committed, replacing, n = claimFresh()
local due, again, dueFull = claimDue(batch - n)
local packed, packedAgain = leaseRecord(committed, again)
local nd, na = nextDue()
local more = 0
if n == batch or dueFull then more = 1 end
return {nd, na, more, packed, packedAgain, replacing, due, causesOf(committed, replacing, again, due)}
`)

// ClaimOptions bounds one claim.
type ClaimOptions struct {
	Now       time.Time
	Watermark time.Time // deadlines later than this stay put (hold-back); zero = Now
	// WatermarkFor, when set, bounds the deadlines further by each device's timeout (hold-back after a
	// blind window, docs/concepts.md): a device whose type's timeout is t is claimed only when its deadline
	// is no later than WatermarkFor(t).
	WatermarkFor WatermarkFunc
	// HeardAfter is the end of the latest blind window that still holds some devices back (zero: none,
	// or only open ones). A failure a device reported at or after it is claimed at its deadline, up to
	// WatermarkFor(0), without waiting for its type's grace: the device's own word, heard after the
	// window, cannot have been overtaken by a signal lost in it (docs/signals.md#reported-failures).
	HeardAfter time.Time
	Lease      time.Duration
	Batch      int // most devices per slot
}

// heardWindow is the claim script's ARGV[8]: "from,to" (ms), the deadlines of the reported failures
// claimed past their type's watermark, or "" when there are none.
func (o ClaimOptions) heardWindow() string {
	if o.HeardAfter.IsZero() || o.WatermarkFor == nil {
		return ""
	}
	to := minTime(o.WatermarkFor(0), o.Now)
	if to.Before(o.HeardAfter) {
		return ""
	}
	return strconv.FormatInt(o.HeardAfter.UnixMilli(), 10) + "," + strconv.FormatInt(to.UnixMilli(), 10)
}

// watermark is the fleet's watermark of a claim: Watermark, never past Now (zero: Now).
func (o ClaimOptions) watermark() time.Time {
	if o.Watermark.IsZero() || o.Watermark.After(o.Now) {
		return o.Now
	}
	return o.Watermark
}

// WatermarkFunc is what hold-back lets a claim take at one moment: the latest deadline that may be
// claimed of a device whose timeout is timeout. A device that may have signalled unseen in a blind window
// waits its own timeout of visible time after the window, so a 30 s gateway is watched again long before
// a 2 h meter.
type WatermarkFunc func(timeout time.Duration) time.Time

// inFlightRecheck is how often a due entry waiting on an in-flight record (a device that signalled
// between its committed claim and the record's release) looks again: its recovery goes out this soon
// after the release, where waiting for the record's lease would delay it by up to detection.lease.
const inFlightRecheck = 250 * time.Millisecond

// nextScanBound bounds how many members a claim (those after now) or a peek (the first ones) reads while
// hold-back holds some types, to find the next deadline of a type it does not hold: past them the
// scanner polls, as it does while every type is held. A peek reads them all at once, on every idle look.
const nextScanBound = 4

// heldScanFactor bounds how many members of held types one claim steps over per slot, in batches: a slot
// with more of them ahead of a due member of a released type claims that one once they are released.
const heldScanFactor = 4

// Claim claims the due devices of slots in one round trip.
//
// The act a committed claim stores is alarm.Decide's usual outcome for a fresh incident, carried out
// ahead of time with the repeat interval in force; Decide alone says whether it stands
// (alarm.Decision.Committed), and the alarm loop acknowledges the claims where it does not.
func (s *Store) Claim(ctx context.Context, slots []int, opts ClaimOptions) (ClaimResult, error) {
	var res ClaimResult
	if len(slots) == 0 {
		return res, nil
	}
	wm, wmByType := s.watermarkByIndex(opts.watermark(), opts.WatermarkFor)
	now := opts.Now.UnixMilli()
	repeats := s.types.byIndex(s.repeatEvery)
	acts := repeats.render(func(every time.Duration) string {
		if every == 0 {
			return dormantScore(now)
		}
		return strconv.FormatInt(now+every.Milliseconds(), 10)
	})
	record := s.newRecord()
	leads, _ := s.untypedTable()
	args := []any{now, wm.UnixMilli(), opts.Lease.Milliseconds(), opts.Batch, record, acts, wmByType, opts.heardWindow(),
		leads.render(millis)}
	calls := make([]scriptCall, len(slots))
	for i, slot := range slots {
		calls[i] = scriptCall{keys: []string{s.keys.Deadlines(slot), s.keys.alarms(slot), s.keys.state(slot), s.keys.inFlight(slot),
			s.keys.causes(slot), s.keys.reported(slot), s.keys.seen(slot)}, args: args}
	}
	cmds, err := s.runAll(ctx, claimScript, calls)
	if err != nil {
		return res, fmt.Errorf("deadline: claim: %w", err)
	}
	var nextDeadline, nextAlarm int64 = -1, -1
	// Decoded first, so the claims are allocated once: a wake-up may hand over thousands.
	replies := make([]claimReply, len(cmds))
	claims := 0
	for i, cmd := range cmds {
		r, err := decodeClaimReply(cmd.Val())
		if err != nil {
			return res, fmt.Errorf("%w (slot %d)", err, slots[i])
		}
		replies[i] = r
		claims += (len(r.committed)+len(r.again)+len(r.due))/2 + len(r.replacing)/3
	}
	res.Claims = make([]Claim, 0, claims)
	res.SlotNext = make([]time.Time, len(replies))
	for i, r := range replies {
		nextDeadline = earliest(nextDeadline, r.nextDeadline)
		nextAlarm = earliest(nextAlarm, r.nextAlarm)
		res.More = res.More || r.more
		res.SlotNext[i] = msTime(float64(earliest(r.nextDeadline, r.nextAlarm)))
		if r.more {
			res.SlotNext[i] = opts.Now
		}
		if res.Claims, err = s.appendClaims(ctx, res.Claims, slots[i], r, record, repeats); err != nil {
			return res, err
		}
	}
	s.holdDeferredBack(res.Claims, opts.Now, opts.WatermarkFor)
	if l := s.layout.Load(); l.moving() && len(res.Claims) > 0 {
		if res.Claims, err = s.dropStaleMoved(ctx, l, res.Claims); err != nil {
			return res, err
		}
	}
	if nextDeadline >= 0 {
		res.NextDeadline = time.UnixMilli(nextDeadline)
	}
	if nextAlarm >= 0 {
		res.NextAlarm = time.UnixMilli(nextAlarm)
	}
	return res, nil
}

// watermarks applies watermarkFor to every type index this store knows, below wm: it returns the earliest
// of the watermarks and, where they differ, each index's (an index this replica has not learnt yet gets
// the earliest); nil where they do not.
func (s *Store) watermarks(wm time.Time, watermarkFor WatermarkFunc) (time.Time, []time.Time) {
	if watermarkFor == nil {
		return wm, nil
	}
	names := s.types.names()
	byIndex := make([]time.Time, len(names))
	low, uniform := wm, true
	for i, name := range names {
		if name == "" {
			continue
		}
		byIndex[i] = wm
		if h := watermarkFor(AsStored(s.timeout(name))); h.Before(wm) {
			byIndex[i] = h
		}
		uniform = uniform && byIndex[i].Equal(byIndex[0])
		low = minTime(low, byIndex[i])
	}
	if uniform {
		return low, nil
	}
	for i, t := range byIndex {
		if t.IsZero() {
			byIndex[i] = low
		}
	}
	return low, byIndex
}

// watermarkByIndex is watermarks with each index's watermark (ms) as the claim script takes it,
// listSep-separated ("" where they do not differ).
func (s *Store) watermarkByIndex(wm time.Time, watermarkFor WatermarkFunc) (time.Time, string) {
	low, byIndex := s.watermarks(wm, watermarkFor)
	var b strings.Builder
	for i, t := range byIndex {
		if i > 0 {
			b.WriteString(listSep)
		}
		b.WriteString(strconv.FormatInt(t.UnixMilli(), 10))
	}
	return low, b.String()
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
