package deadline

import "github.com/redis/go-redis/v9"

// A claim of one slot runs as steps, one script each, sent together in the claim's one pipeline (so one
// round trip, whatever the number of slots): each step is atomic on its own, and no guarantee needs two of
// them to be atomic together.
//
//  1. claimHeldScript, only while hold-back holds some types after a blind window: the devices due by
//     their own type's watermark past the fleet's, and the reported failures heard after the window.
//  2. claimFreshScript: reported failures put back (cause.go), then the devices due by the fleet's
//     watermark, in deadline order.
//  3. claimDueScript: the alarm entries that came due, and the claims of in-flight records whose lease ran
//     out, handed out again.
//  4. claimNextScript: the slot's next due scores, for the scanner's sleep (read only).
//
// Steps 1 and 2 commit their plain claims (doc.go) and list them in the call's in-flight record in the
// same script; step 3 adds the claims it hands out again to that record. A device is claimed by one step
// at most: fresh claims leave the deadlines set and replace any open incident's alarm entry with their
// own, leased or later, before step 3 reads the due entries; steps 1 and 2 take members of disjoint score
// ranges. The order matters (step 3 after 1 and 2), so Redis must never run a later step of a claim and
// refuse an earlier one: a claim that finds any step missing loads all four, in this order (runScripts),
// and Redis only ever drops them all (a restart, a failover, SCRIPT FLUSH). A reported failure that step
// 2 puts back while hold-back holds its type is claimed by the next claim's step 1.
//
// Each step takes the first of these KEYS and ARGV, as many as it reads (claimStepKeys, claimStepArgs):
//
// KEYS[1] deadlines  KEYS[2] alarms  KEYS[3] state  KEYS[4] in-flight records  KEYS[5] causes
// KEYS[6] reported  KEYS[7] seen
// ARGV[1] now (ms)  ARGV[2] watermark (ms): only deadlines ≤ it are claimed (hold-back)
// ARGV[3] lease (ms)  ARGV[4] batch: most fresh claims (steps 1 and 2 together), and most due entries
// ARGV[5] the record of this call's committed claims
// ARGV[6] a committed claim's next act per type index (now + its repeat interval, or a dormant score),
// listSep-separated, or one value for every type
// ARGV[7] the watermark (ms) per type index, listSep-separated, where types differ (hold-back after a
// blind window: each device waits its own timeout); "" when ARGV[2] holds for every type. An index
// past the list gets ARGV[2].
// ARGV[8] "from,to" (ms): a reported failure whose deadline is within them is claimed past its type's
// watermark (ClaimOptions.HeardAfter); "" when hold-back holds nobody back after a window.
// ARGV[9] lead (ms) per type index, listSep-separated, as MarkEarlier takes it (negative: a type with
// expected times, whose last signal is in seen).
//
// Every reply element costs Redis more than the Lua around it, so committed claims go back packed into
// one string, and claimed members leave the deadlines set by rank where they can, not by name.
var claimSteps = struct {
	held, fresh, due, next *redis.Script
	all                    []*redis.Script // in their order
}{
	claimHeldScript, claimFreshScript, claimDueScript, claimNextScript,
	[]*redis.Script{claimHeldScript, claimFreshScript, claimDueScript, claimNextScript},
}

// claimStepKeys and claimStepArgs are how many of the KEYS and ARGV above each step reads.
var (
	claimStepKeys = map[*redis.Script]int{claimHeldScript: 7, claimFreshScript: 7, claimDueScript: 5, claimNextScript: 2}
	claimStepArgs = map[*redis.Script]int{claimHeldScript: 9, claimFreshScript: 9, claimDueScript: 5, claimNextScript: 7}
)

// claimArgsLua reads the arguments every claim step takes: leased is the lease's end formatted once, as
// Redis turns a Lua number into text with %.17g for every element, and marked as a lease (luaLeased).
const claimArgsLua = `
${luaLeased}
local now, wm, lease, batch = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local floor = math.floor
local leased = leasedUntil(now + lease)
`

// claimWatermarksLua defines dueBy(w), the highest score due by watermark w (ms) for every type, and
// reads the watermarks per type index (wms[index + 1], ARGV[7]) and the latest of them or of the common
// one (high).
const claimWatermarksLua = `local function dueBy(w) return string.format('%.0f', w * ${MaxTypes} + ${MaxTypes} - 1) end
local wms, high = {}, wm
for v in string.gmatch(ARGV[7], ${listItem}) do
  local x = tonumber(v)
  wms[#wms+1] = x
  if x > high then high = x end
end
`

// claimRecordLua defines addToRecord(claims), the claiming steps' part of the in-flight record (ARGV[5])
// that leases this call's committed claims and those handed out again: it adds claims (flat pairs device,
// what its claim committed) to the record and returns them packed. Section (3) of the claim.
const claimRecordLua = `local function addToRecord(claims)
  if #claims == 0 then return '' end
  local packed = table.concat(claims, ${packSep})
  local before = redis.call('HGET', KEYS[4], ARGV[5])
  redis.call('HSET', KEYS[4], ARGV[5], before and before .. ${packSep} .. packed or packed)
  redis.call('ZADD', KEYS[2], leased, ARGV[5])
  return packed
end
`

// claimCausesLua defines causesOf(devs, dls), section (5) of the claim: the causes of the claimed
// incidents that did not begin with silence (cause.go), as flat pairs device, cause, read only in a slot
// that has any, so a fleet without them pays nothing more. A fresh claim's cause of an earlier incident
// (its deadline is not dls[k]) is dropped.
const claimCausesLua = `local function causesOf(devs, dls)
  if #devs == 0 or redis.call('EXISTS', KEYS[5]) == 0 then return {} end
  local vals = gather(devs, function(...) return redis.call('HMGET', KEYS[5], ...) end)
  local out, stale = {}, {}
  for k, d in ipairs(devs) do
    local v = vals[k]
    if v and dls[k] and tonumber(string.match(v, '^%d+')) ~= dls[k] then
      stale[#stale+1] = d
    elseif v then
      out[#out+1] = d
      out[#out+1] = v
    end
  end
  pieces(stale, 1, function(...) redis.call('HDEL', KEYS[5], ...) end)
  return out
end
`

// claimCommitLua defines commitFresh(due), section (1) of the claim, for the steps that take members out
// of the deadlines set (due: flat pairs member, deadlines-set score). A device without an open incident
// is committed (doc.go): its state is the bare score, its alarm entry the next act (ARGV[6]). One whose
// open incident is older is replaced: a full state with nothing sent that owes what owing says (prev's
// recovery when prev was reported, else what prev owed: State.owing) and a leased alarm entry; the alarm
// loop acknowledges it per device. An older deadline is a replayed old signal and is dropped. It returns
// the step's reply: {members, committed packed, replacing triples, causes}.
const claimCommitLua = claimRecordLua + claimCausesLua + `local function owing(prev, pdl)
  if not string.find(prev, ${stateSep}, 1, true) then return string.format('%.0f', pdl), '0' end
  local next, hold = string.match(prev, ${stateNextPattern}), string.match(prev, ${stateHoldPattern})
  if next ~= '0' then return string.format('%.0f', pdl), '0' end
  if hold == ${holdFieldLate} then return string.format('%.0f', pdl), '1' end
  return string.match(prev, ${stateOwedPattern}) or '0', string.match(prev, ${stateOwedWarnedPattern}) or '0'
end
local function commitFresh(due)
  local committed, replacing, members, hset, zadd, acts, devs, dls = {}, {}, {}, {}, {}, {}, {}, {}
  for v in string.gmatch(ARGV[6], ${listItem}) do acts[#acts+1] = v end
  for i = 1, #due, 2 do members[#members+1] = due[i] end
  local open = #members > 0 and gather(members, function(...) return redis.call('HMGET', KEYS[3], ...) end) or {}
  for i = 1, #due, 2 do
    local m, sc, prev = due[i], due[i+1], open[(i + 1) / 2]
    local s = tonumber(sc)
    local dl = floor(s / ${MaxTypes})
    -- An open incident: a full state starts with its deadline, a committed one is its bare score.
    local pdl = prev and (tonumber(string.match(prev, ${stateDeadlinePattern})) or floor(tonumber(prev) / ${MaxTypes}))
    if not prev then
      committed[#committed+1] = m
      committed[#committed+1] = sc
      hset[#hset+1] = m
      hset[#hset+1] = sc
      zadd[#zadd+1] = acts[s % ${MaxTypes} + 1] or acts[1]
      zadd[#zadd+1] = m
    elseif pdl < dl then
      replacing[#replacing+1] = m
      replacing[#replacing+1] = sc
      replacing[#replacing+1] = prev
      hset[#hset+1] = m
      hset[#hset+1] = string.format(${stateReplacingFormat}, dl, s - dl * ${MaxTypes}, owing(prev, pdl))
      zadd[#zadd+1] = leased
      zadd[#zadd+1] = m
    end
    if not prev or pdl < dl then
      devs[#devs+1] = m
      dls[#devs] = dl
    end
  end
  if #hset > 0 then
    hset[#hset+1] = ${stateGuardField}
    hset[#hset+1] = ${stateGuardValue}
    pieces(hset, 2, function(...) redis.call('HSET', KEYS[3], ...) end)
    pieces(zadd, 2, function(...) redis.call('ZADD', KEYS[2], ...) end)
  end
  return {#members, addToRecord(committed), replacing, causesOf(devs, dls)}
end
`

// claimFreshScript is step 2: reported failures put back, then up to batch members of the deadlines set
// due by the watermark (ARGV[2]), fewer when step 1 took some. Reply: {members taken, committed (flat pairs
// device, deadlines-set score, packed), replacing (flat triples device, score, replaced state), causes
// (flat pairs device, cause)}.
var claimFreshScript = newScript(`
${luaPieces}` + claimArgsLua + claimWatermarksLua + claimCommitLua + reportedFailuresLua + `reportedFailures()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', dueBy(wm), 'LIMIT', 0, batch, 'WITHSCORES')
if #due > 0 then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #due / 2 - 1) end
return commitFresh(due)
`)

// claimHeldScript is step 1, run only while hold-back holds some types (ARGV[7] or ARGV[8] not empty):
// it claims, past the fleet's watermark, what step 2 leaves of the batch. Reply: as claimFreshScript's.
//
// pastWatermark takes the members of the types whose own watermark is later (ARGV[7]). Members of types
// still held are stepped over, at most batch × heldScanFactor of them a call; it reads only what can fill
// the batch, then past the held members read, up to that bound: most often nothing between the
// watermarks is held. heardFailures takes the reported failures heard after every blind window that still
// holds (ARGV[8]) that are pending (the device's deadline is still the failure's) and held by their
// type's watermark: the device's own word, heard since, cannot have been overtaken by a signal lost in a
// window.
var claimHeldScript = newScript(`
${luaPieces}` + claimArgsLua + claimWatermarksLua + claimCommitLua + `-- Past the fleet's watermark, the members due by their type's, appended to due (flat pairs) up to left.
local function pastWatermark(due, left)
  local offset, bound = 0, batch * ${heldScanFactor}
  while high > wm and #due / 2 < left and offset < bound do
    local want = math.min(left - #due / 2, bound - offset)
    local past = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. dueBy(wm), dueBy(high), 'LIMIT', offset, want, 'WITHSCORES')
    for i = 1, #past, 2 do
      local s = tonumber(past[i+1])
      if floor(s / ${MaxTypes}) <= (wms[s % ${MaxTypes} + 1] or wm) then
        due[#due+1] = past[i]
        due[#due+1] = past[i+1]
      end
    end
    if #past / 2 < want then break end
    offset = offset + want
  end
end
-- The reported failures heard after the blind windows, pending and held by their type, appended likewise.
local function heardFailures(due, left)
  local from, to = string.match(ARGV[8], '^(%d+),(%d+)$')
  if not from or #due / 2 >= left or redis.call('EXISTS', KEYS[6]) == 0 then return end
  local heard = redis.call('ZRANGEBYSCORE', KEYS[6], from, to, 'LIMIT', 0, batch, 'WITHSCORES')
  for i = 1, #heard, 2 do
    if #due / 2 >= left then return end
    local f, s = tonumber(heard[i+1]), tonumber(redis.call('ZSCORE', KEYS[1], heard[i]))
    if s and floor(s / ${MaxTypes}) == f and f > (wms[s % ${MaxTypes} + 1] or wm) then
      due[#due+1] = heard[i]
      due[#due+1] = string.format('%.0f', s)
    end
  end
end
-- Step 2 takes the members due by the watermark first, up to batch: this step takes what it leaves.
local left = batch - math.min(batch, redis.call('ZCOUNT', KEYS[1], '-inf', dueBy(wm)))
local due = {}
pastWatermark(due, left)
heardFailures(due, left)
local members = {}
for i = 1, #due, 2 do members[#members+1] = due[i] end
pieces(members, 1, function(...) redis.call('ZREM', KEYS[1], ...) end)
return commitFresh(due)
`)

// claimDueScript is step 3: up to batch due alarm entries, leased again and returned with their state.
// Reply: {1 when batch entries were due, else 0; again (flat pairs device, score or a suppression's
// committed state (wake.go), packed); due (flat pairs device, state); causes (flat pairs device, cause)}.
var claimDueScript = newScript(`
${luaPieces}` + claimArgsLua + claimRecordLua + claimCausesLua + `-- An expired in-flight record: its claims whose state is still as committed go to again (flat pairs).
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

-- (2) Due alarm entries, up to batch: leased again and returned with their state. An entry without a
-- state is removed: an orphan, or an expired record, whose claims are handed out again.
local entries, again, lease, orphans = {}, {}, {}, {}
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, batch)
-- One read and one write per kind, as for fresh claims: a recovery wave makes many entries due at once.
local states = #due > 0 and gather(due, function(...) return redis.call('HMGET', KEYS[3], ...) end) or {}
readRecords(states)
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
    if string.byte(m, 1) == ${recordMarkByte} then handOutAgain(m, again) end
  end
end
pieces(lease, 2, function(...) redis.call('ZADD', KEYS[2], ...) end)
pieces(orphans, 1, function(...) redis.call('ZREM', KEYS[2], ...) end)
local devs = {}
for i = 1, #again, 2 do devs[#devs+1] = again[i] end
for i = 1, #entries, 2 do devs[#devs+1] = entries[i] end
local full = 0
if #due == batch then full = 1 end
return {full, addToRecord(again), entries, causesOf(devs, {})}
`)

// claimNextScript is step 4, read only: the earliest deadline a claim may take once it is due, and the
// earliest act, left in the slot, so the scanner sleeps until then. While hold-back holds some types, that
// deadline is the first after now of a type it does not hold, among the next nextScanBound members; while
// it holds every type, or those members are all held, there is none and the scanner polls
// (detection.max_idle_wait). Reply: {next deadline ms or -1, next alarm ms or -1}.
var claimNextScript = newScript(claimArgsLua + claimWatermarksLua + `local function nextDeadline()
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
local na = -1
local a = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if a[2] then
  local v = tonumber(a[2])
  -- A dormant entry is never due; a lease is due at its end, the whole ms past its score (leaseMark).
  if v and v < ${DormantAfter} then na = math.ceil(v) end
end
return {nextDeadline(), na}
`)
