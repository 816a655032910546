package deadline

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Claim is one device handed to the alarm loop. Until it is acknowledged it is leased: if the process
// dies, it becomes due again when the lease runs out and the same incident is claimed again (same
// deadline, so the same event id).
type Claim struct {
	Device string
	Slot   int
	Type   string
	State  State // the incident as stored; State.Deadline identifies it
	// Fresh is true when the deadline just passed (claimed from the deadlines set), false when the alarm
	// entry came due (a repeat, a redelivery after a lease, or a recovery probe).
	Fresh bool
	// Replaced is an earlier incident of the same device that was still open when this one began: the
	// device signalled (so it recovered) and fell silent again before `recovered` went out.
	Replaced *State
	// Record is set on a committed claim: the claim already stored the incident as the alarm loop records
	// it after publishing `interrupted` (see Commit), and Record, the in-flight record that leases it,
	// is its whole acknowledgement once the event is out: Settle releases it. "" on other claims.
	Record string
	// CommittedRepeat is the repeat interval the committed next act time was computed with (0: dormant,
	// no repeats). The alarm loop acknowledges a committed claim it decided otherwise as any other.
	CommittedRepeat time.Duration
}

// ClaimResult is what one wake-up found.
type ClaimResult struct {
	Claims []Claim
	// More is true when a slot returned a full batch: claim again at once.
	More bool
	// NextDeadline and NextAlarm are the earliest scores left in the claimed slots (zero when none), so
	// the scanner sleeps exactly until then instead of polling.
	NextDeadline, NextAlarm time.Time
}

// Commit: a plain fresh claim (a deadline passed, no open incident) is stored by the claim itself as the
// incident the alarm loop almost always makes of it — `interrupted` sent, the next act one repeat
// interval of its type from now (never, without repeats) — instead of being leased in the alarms set and
// rewritten by an acknowledgement. The claim leases the slot's whole batch instead, as one in-flight
// record (the packed claims in the slot's in-flight hash, a member "\x00claims:…" in its alarms set with
// the lease end as score); the loop releases it once the events are out. A record whose lease runs out
// comes due like an alarm entry and its claims are handed out again — those whose state is still the one
// committed — so a crash between claim and publish loses nothing. The alarm loop acknowledges the few
// claims it decided otherwise (a silence, a failed publish, a recovery) as before, guarded as always.
// Measured at 1M deadlines over 10 s (docs/benchmarks.md, session 5): the scripts' Redis time fell by a
// sixth (the acknowledgement script's reads and writes per device are gone), a round trip per wake-up
// went away, and detection then kept the 100k events/s pace it had fallen short of.

// claimScript moves up to batch due devices of one slot into the alarm loop's hands.
//
// KEYS[1] deadlines  KEYS[2] alarms  KEYS[3] state  KEYS[4] in-flight records
// ARGV[1] now (ms)  ARGV[2] watermark (ms): only deadlines ≤ it are claimed (hold-back)
// ARGV[3] lease (ms)  ARGV[4] batch  ARGV[5] the record of this call's committed claims
// ARGV[6] a committed claim's next act score per type index (now + its repeat interval, or a dormant
// score), listSep-separated, or one for every type
// Reply: {next deadline ms or -1, next alarm ms or -1, more 0/1, number of replacing fresh claims R,
// committed fresh claims packed as "device\nscore\ndevice\nscore…" ("" when none), the same for the
// claims of expired records handed out again, then R triples (device, deadline score, replaced state),
// then pairs (device, state) of due alarm entries}
//
// A committed claim's state is its bare deadlines-set score (see DecodeState); its alarm entry is its next
// act. A fresh claim that replaces an open incident is not committed: it gets a full state with nothing
// sent and an alarm entry leased until now+lease, and the loop acknowledges it per device. A device whose
// deadline is not newer than its open incident's is a replayed old signal and is dropped. Due alarm
// entries are leased again and returned with their state; entries without state are orphans and removed.
// Every reply element and command argument costs Redis more than the Lua around it (INFO commandstats:
// formatting a state per claim and returning three elements for it took a third of the script's time), so
// the fresh claims go back as one string (device ids hold no control characters), and the claimed members
// leave by rank, not by name.
var claimScript = newScript(`
local now, wm, lease, batch = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local rec = ARGV[5]
local out = {-1, -1, 0, 0, '', ''}
local floor, byte = math.floor, string.byte
-- Formatted once: Redis turns a Lua number argument into text with %.17g for every element.
local leased = string.format('%.0f', now + lease)
local packed = {}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', wm * ${MaxTypes} + ${MaxTypes} - 1), 'LIMIT', 0, batch, 'WITHSCORES')
local n = #due / 2
if n == batch then out[3] = 1 end
if n > 0 then
  -- The committed next act per type index: one for every type, or a table.
  local acts = {}
  for v in string.gmatch(ARGV[6], ${listItem}) do acts[#acts+1] = v end
  local uniform = #acts == 1 and acts[1]
  local rem, hset, zadd = {}, {}, {}
  for i = 1, #due, 2 do rem[#rem+1] = due[i] end
  local prevs = redis.call('HMGET', KEYS[3], unpack(rem))
  local replacing = 0
  for i = 1, #due, 2 do
    local m, sc = due[i], due[i+1]
    local prev = prevs[(i + 1) / 2]
    if prev then
      -- A full state starts with its deadline and a colon; a committed one is its bare score.
      local pdl = tonumber(string.match(prev, ${stateDeadlinePattern})) or floor(tonumber(prev) / ${MaxTypes})
      local s = tonumber(sc)
      local dl = floor(s / ${MaxTypes})
      if pdl < dl then
        out[#out+1] = m
        out[#out+1] = sc
        out[#out+1] = prev
        replacing = replacing + 1
        hset[#hset+1] = m
        hset[#hset+1] = string.format(${stateOpenFormat}, dl, s - dl * ${MaxTypes})
        zadd[#zadd+1] = leased
        zadd[#zadd+1] = m
      end
    else
      packed[#packed+1] = m
      packed[#packed+1] = sc
      hset[#hset+1] = m
      hset[#hset+1] = sc
      zadd[#zadd+1] = uniform or acts[floor(tonumber(sc) % ${MaxTypes}) + 1] or acts[1]
      zadd[#zadd+1] = m
    end
  end
  out[4] = replacing
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - 1)
  if #hset > 0 then
    hset[#hset+1] = ${StateGuardField}
    hset[#hset+1] = ${stateGuardValue}
    redis.call('HSET', KEYS[3], unpack(hset))
    redis.call('ZADD', KEYS[2], unpack(zadd))
  end
end
local again = {}
local left = batch - n
if left > 0 then
  local due2 = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, left)
  if #due2 == left then out[3] = 1 end
  if #due2 > 0 then
    -- One read and one write per kind, as for fresh claims: a recovery wave makes many entries due at once.
    local states = redis.call('HMGET', KEYS[3], unpack(due2))
    local lease, orphans = {}, {}
    for j, m in ipairs(due2) do
      local st = states[j]
      if st then
        lease[#lease+1] = leased
        lease[#lease+1] = m
        out[#out+1] = m
        out[#out+1] = st
      else
        orphans[#orphans+1] = m
        if byte(m, 1) == ${recordMarkByte} then
          -- An in-flight record whose lease ran out: hand out again the claims still as committed.
          local data = redis.call('HGET', KEYS[4], m)
          redis.call('HDEL', KEYS[4], m)
          if data then
            local devs, scs = {}, {}
            for d, s in string.gmatch(data, ${packedPair}) do
              devs[#devs+1] = d
              scs[#scs+1] = s
            end
            if #devs > 0 then
              local cur = redis.call('HMGET', KEYS[3], unpack(devs))
              for k = 1, #devs do
                if cur[k] == scs[k] then
                  again[#again+1] = devs[k]
                  again[#again+1] = scs[k]
                end
              end
            end
          end
        end
      end
    end
    if #lease > 0 then redis.call('ZADD', KEYS[2], unpack(lease)) end
    if #orphans > 0 then redis.call('ZREM', KEYS[2], unpack(orphans)) end
  end
end
if #packed + #again > 0 then
  out[5] = table.concat(packed, ${packSep})
  out[6] = table.concat(again, ${packSep})
  local all = out[5]
  if #again > 0 then
    if all ~= '' then all = all .. ${packSep} end
    all = all .. out[6]
  end
  redis.call('HSET', KEYS[4], rec, all)
  redis.call('ZADD', KEYS[2], leased, rec)
end
local nd = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if nd[2] then out[1] = floor(tonumber(nd[2]) / ${MaxTypes}) end
local na = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if na[2] then
  local v = tonumber(na[2])
  if v and v < ${DormantAfter} then out[2] = v end -- a dormant entry is never due
end
return out
`)

// ClaimOptions bounds one claim.
type ClaimOptions struct {
	Now       time.Time
	Watermark time.Time // deadlines later than this stay put (hold-back); zero = Now
	Lease     time.Duration
	Batch     int // most devices per slot
}

// Claim claims the due devices of slots in one round trip.
func (s *Store) Claim(ctx context.Context, slots []int, opts ClaimOptions) (ClaimResult, error) {
	var res ClaimResult
	if len(slots) == 0 {
		return res, nil
	}
	wm := opts.Watermark
	if wm.IsZero() || wm.After(opts.Now) {
		wm = opts.Now
	}
	now := opts.Now.UnixMilli()
	repeats := s.types.byIndex(s.repeatEvery)
	acts := repeats.render(func(every time.Duration) string {
		if every == 0 {
			return dormantScore(now)
		}
		return strconv.FormatInt(now+every.Milliseconds(), 10)
	})
	record := s.newRecord()
	args := []any{now, wm.UnixMilli(), opts.Lease.Milliseconds(), opts.Batch, record, acts}
	calls := make([]scriptCall, len(slots))
	for i, slot := range slots {
		calls[i] = scriptCall{keys: []string{s.keys.Deadlines(slot), s.keys.Alarms(slot), s.keys.State(slot), s.keys.InFlight(slot)}, args: args}
	}
	cmds, err := s.runAll(ctx, claimScript, calls)
	if err != nil {
		return res, fmt.Errorf("deadline: claim: %w", err)
	}
	var nextDeadline, nextAlarm int64 = -1, -1
	for i, cmd := range cmds {
		reply, err := cmd.Slice()
		if err != nil || len(reply) < 6 {
			return res, fmt.Errorf("deadline: claim slot %d: unexpected reply %v: %w", slots[i], reply, err)
		}
		nextDeadline = earliest(nextDeadline, reply[0].(int64))
		nextAlarm = earliest(nextAlarm, reply[1].(int64))
		res.More = res.More || reply[2].(int64) == 1
		replacing := 3 * int(reply[3].(int64))
		if 6+replacing > len(reply) {
			return res, fmt.Errorf("deadline: claim slot %d: reply of %d elements announces %d replacing claims", slots[i], len(reply), replacing/3)
		}
		for k, fresh := range []bool{true, false} { // committed fresh claims, then those handed out again
			packed, _ := reply[4+k].(string)
			for rest := packed; rest != ""; {
				var device, score string
				device, rest, _ = strings.Cut(rest, packSep)
				score, rest, _ = strings.Cut(rest, packSep)
				c, err := s.decodeFresh(ctx, slots[i], device, score, "")
				if err != nil {
					return res, err
				}
				c.Fresh, c.Record, c.CommittedRepeat = fresh, record, repeats.of(c.State.TypeIndex)
				res.Claims = append(res.Claims, c)
			}
		}
		for j := 6; j < 6+replacing; j += 3 {
			device, _ := reply[j].(string)
			score, _ := reply[j+1].(string)
			prev, _ := reply[j+2].(string)
			c, err := s.decodeFresh(ctx, slots[i], device, score, prev)
			if err != nil {
				return res, err
			}
			res.Claims = append(res.Claims, c)
		}
		for j := 6 + replacing; j+2 <= len(reply); j += 2 {
			c, err := s.decodeDue(ctx, slots[i], reply[j:j+2])
			if err != nil {
				return res, err
			}
			res.Claims = append(res.Claims, c)
		}
	}
	if l := s.layout.Load(); l.Moving() && len(res.Claims) > 0 {
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

// decodeFresh reads a fresh claim: device, deadline score, replaced state ("" when none).
func (s *Store) decodeFresh(ctx context.Context, slot int, device, score, prev string) (Claim, error) {
	st, err := stateOfScore(score)
	if err != nil {
		return Claim{}, fmt.Errorf("deadline: claim slot %d: device %q: %w", slot, device, err)
	}
	c := Claim{Device: device, Slot: slot, State: st, Fresh: true, Type: s.types.name(ctx, st.TypeIndex)}
	if prev != "" {
		p, err := DecodeState(prev)
		if err != nil {
			return Claim{}, err
		}
		c.Replaced = &p
	}
	return c, nil
}

// decodeDue reads a due alarm entry's claim: device, state.
func (s *Store) decodeDue(ctx context.Context, slot int, f []any) (Claim, error) {
	device, _ := f[0].(string)
	enc, _ := f[1].(string)
	st, err := DecodeState(enc)
	if err != nil {
		return Claim{}, err
	}
	return Claim{Device: device, Slot: slot, State: st, Type: s.types.name(ctx, st.TypeIndex)}, nil
}

func earliest(a, b int64) int64 {
	if a < 0 || (b >= 0 && b < a) {
		return b
	}
	return a
}
