package deadline

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Claim is one device handed to the alarm loop. Until it is acknowledged its alarm entry is leased: if
// the process dies, the entry becomes due again when the lease runs out and the same incident is claimed
// again (same deadline, so the same event id).
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

// claimScript moves up to batch due devices of one slot into the alarm loop's hands.
//
// KEYS[1] deadlines  KEYS[2] alarms  KEYS[3] state
// ARGV[1] now (ms)  ARGV[2] watermark (ms): only deadlines ≤ it are claimed (hold-back)
// ARGV[3] lease (ms)  ARGV[4] batch  ARGV[5], ARGV[6] StateGuardField and its value
// Reply: {next deadline ms or -1, next alarm ms or -1, more 0/1, number of replacing fresh claims R,
// the other fresh claims packed as "device\nscore\ndevice\nscore…" ("" when none), then R triples
// (device, deadline score, replaced state), then pairs (device, state) of due alarm entries}
//
// Fresh claims leave the deadlines set, get a state and an alarm entry leased until now+lease. A device
// whose deadline is not newer than its open incident's is a replayed old signal and is dropped. Due alarm
// entries are leased again and returned with their state; entries without state are orphans and removed.
// Every reply element and command argument costs Redis more than the Lua around it (INFO commandstats:
// formatting a state per claim and returning three elements for it took a third of the script's time), so
// a fresh claim's state is its score as Redis returned it (see DecodeState), the fresh claims go back as
// one string (device ids hold no control characters), and the claimed members leave by rank, not by name.
var claimScript = redis.NewScript(`
local now, wm, lease, batch = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local out = {-1, -1, 0, 0, ''}
-- Formatted once: Redis turns a Lua number argument into text with %.17g for every element.
local leased = string.format('%.0f', now + lease)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', wm * 1024 + 1023), 'LIMIT', 0, batch, 'WITHSCORES')
local n = #due / 2
if n == batch then out[3] = 1 end
if n > 0 then
  local rem, hset, zadd, packed = {}, {}, {}, {}
  for i = 1, #due, 2 do rem[#rem+1] = due[i] end
  local prevs = redis.call('HMGET', KEYS[3], unpack(rem))
  local replacing = 0
  for i = 1, #due, 2 do
    local m, sc = due[i], due[i+1]
    local prev = prevs[(i + 1) / 2]
    local keep = true
    if prev then
      -- A full state starts with its deadline and a colon; a fresh claim's state is its bare score.
      local pdl = tonumber(string.match(prev, '^(%d+):')) or math.floor(tonumber(prev) / 1024)
      keep = pdl < math.floor(tonumber(sc) / 1024)
      if keep then
        out[#out+1] = m
        out[#out+1] = sc
        out[#out+1] = prev
        replacing = replacing + 1
      end
    else
      packed[#packed+1] = m
      packed[#packed+1] = sc
    end
    if keep then
      hset[#hset+1] = m
      hset[#hset+1] = sc
      zadd[#zadd+1] = leased
      zadd[#zadd+1] = m
    end
  end
  out[4] = replacing
  out[5] = table.concat(packed, '\n')
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - 1)
  if #hset > 0 then
    hset[#hset+1] = ARGV[5]
    hset[#hset+1] = ARGV[6]
    redis.call('HSET', KEYS[3], unpack(hset))
    redis.call('ZADD', KEYS[2], unpack(zadd))
  end
end
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
      end
    end
    if #lease > 0 then redis.call('ZADD', KEYS[2], unpack(lease)) end
    if #orphans > 0 then redis.call('ZREM', KEYS[2], unpack(orphans)) end
  end
end
local nd = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if nd[2] then out[1] = math.floor(tonumber(nd[2]) / 1024) end
local na = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if na[2] then
  local v = tonumber(na[2])
  if v and v < 1e300 then out[2] = v end
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
	args := []any{opts.Now.UnixMilli(), wm.UnixMilli(), opts.Lease.Milliseconds(), opts.Batch, StateGuardField, stateGuardValue}
	calls := make([]scriptCall, len(slots))
	for i, slot := range slots {
		calls[i] = scriptCall{keys: []string{s.keys.Deadlines(slot), s.keys.Alarms(slot), s.keys.State(slot)}, args: args}
	}
	cmds, err := s.runAll(ctx, claimScript, calls)
	if err != nil {
		return res, fmt.Errorf("deadline: claim: %w", err)
	}
	var nextDeadline, nextAlarm int64 = -1, -1
	for i, cmd := range cmds {
		reply, err := cmd.Slice()
		if err != nil || len(reply) < 5 {
			return res, fmt.Errorf("deadline: claim slot %d: unexpected reply %v: %w", slots[i], reply, err)
		}
		nextDeadline = earliest(nextDeadline, reply[0].(int64))
		nextAlarm = earliest(nextAlarm, reply[1].(int64))
		res.More = res.More || reply[2].(int64) == 1
		replacing := 3 * int(reply[3].(int64))
		packed, _ := reply[4].(string)
		if 5+replacing > len(reply) {
			return res, fmt.Errorf("deadline: claim slot %d: reply of %d elements announces %d replacing claims", slots[i], len(reply), replacing/3)
		}
		for rest := packed; rest != ""; {
			var device, score string
			device, rest, _ = strings.Cut(rest, "\n")
			score, rest, _ = strings.Cut(rest, "\n")
			c, err := s.decodeFresh(ctx, slots[i], device, score, "")
			if err != nil {
				return res, err
			}
			res.Claims = append(res.Claims, c)
		}
		for j := 5; j < 5+replacing; j += 3 {
			device, _ := reply[j].(string)
			score, _ := reply[j+1].(string)
			prev, _ := reply[j+2].(string)
			c, err := s.decodeFresh(ctx, slots[i], device, score, prev)
			if err != nil {
				return res, err
			}
			res.Claims = append(res.Claims, c)
		}
		for j := 5 + replacing; j+2 <= len(reply); j += 2 {
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
