package deadline

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
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
}

// ackScript applies one slot's acknowledgements, each guarded by the claimed incident's deadline so an
// ack never clobbers a newer incident, an operator's ack, or a signal that arrived meanwhile.
//
// KEYS[1] deadlines  KEYS[2] alarms  KEYS[3] state  KEYS[4] dead
// ARGV[1] now (ms); then groups of five: op (R|X|P), device, claimed deadline (ms), next act (ms|+inf), state
// Reply: per op 1 when applied, 0 when the incident was gone or replaced.
var ackScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV, 5 do
  local op, m, dl, act, st = ARGV[i], ARGV[i+1], tonumber(ARGV[i+2]), ARGV[i+3], ARGV[i+4]
  local cur = redis.call('HGET', KEYS[3], m)
  local cdl = cur and tonumber(string.match(cur, '^(%d+):'))
  if cdl ~= dl then
    out[#out+1] = 0
  elseif op == 'X' then
    redis.call('HDEL', KEYS[3], m)
    redis.call('ZREM', KEYS[2], m)
    redis.call('ZREM', KEYS[4], m)
    out[#out+1] = 1
  else
    if string.match(cur, '^%d+:%d+:%d+:1:') then
      st = (string.gsub(st, '^(%d+:%d+:%d+:)0:', '%11:'))
    end
    redis.call('HSET', KEYS[3], m, st)
    if op == 'P' then
      redis.call('ZREM', KEYS[2], m)
      redis.call('ZADD', KEYS[4], now, m)
    else
      local sc = redis.call('ZSCORE', KEYS[1], m)
      if sc and math.floor(tonumber(sc) / 1024) > dl then act = now end
      redis.call('ZADD', KEYS[2], act, m)
    end
    out[#out+1] = 1
  end
end
return out
`)

// Acknowledge applies acks, one script call per slot, in one round trip. applied[i] reports whether
// acks[i] took effect (false: the incident had ended or been replaced meanwhile — not an error).
func (s *Store) Acknowledge(ctx context.Context, acks []Ack) (applied []bool, err error) {
	if len(acks) == 0 {
		return nil, nil
	}
	now := s.now().UnixMilli()
	type group struct {
		args []any
		idx  []int
	}
	bySlot := map[int]*group{}
	var order []int
	for i, a := range acks {
		g := bySlot[a.Slot]
		if g == nil {
			g = &group{args: []any{now}}
			bySlot[a.Slot] = g
			order = append(order, a.Slot)
		}
		next := "+inf"
		if a.Op == Reschedule && !a.Dormant {
			next = fmt.Sprint(a.Next.UnixMilli())
		}
		g.args = append(g.args, string(a.Op), a.Device, a.Claimed, next, a.State.Encode())
		g.idx = append(g.idx, i)
	}
	calls := make([]scriptCall, len(order))
	for i, slot := range order {
		calls[i] = scriptCall{keys: []string{s.keys.Deadlines(slot), s.keys.Alarms(slot), s.keys.State(slot), s.keys.Dead(slot)}, args: bySlot[slot].args}
	}
	cmds, err := s.runAll(ctx, ackScript, calls)
	if err != nil {
		return nil, fmt.Errorf("deadline: acknowledge: %w", err)
	}
	applied = make([]bool, len(acks))
	for i, slot := range order {
		res, err := cmds[i].Int64Slice()
		if err != nil {
			return nil, fmt.Errorf("deadline: acknowledge slot %d: %w", slot, err)
		}
		for j, v := range res {
			applied[bySlot[slot].idx[j]] = v == 1
		}
	}
	return applied, nil
}

// setAckedScript marks an open incident acknowledged by an operator.
//
// KEYS[1] state
// ARGV[1] device
// Reply: 1 when the device has an open incident, 0 otherwise.
var setAckedScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], (string.gsub(cur, '^(%d+:%d+:%d+:)0:', '%11:')))
return 1
`)

// SetAcked records an operator's acknowledgement: the alarm loop sends no more repeats for the open
// incident, but still reports recovery. It returns false when the device has no open incident.
func (s *Store) SetAcked(ctx context.Context, device string) (bool, error) {
	for _, slot := range s.slotsOf(device) {
		n, err := setAckedScript.Run(ctx, s.rdb, []string{s.keys.State(slot)}, device).Int()
		if err != nil {
			return false, fmt.Errorf("deadline: ack %q: %w", device, err)
		}
		if n == 1 {
			return true, nil
		}
	}
	return false, nil
}

// slotsOf returns the device's slot and, while a doubling settles, its old slot.
func (s *Store) slotsOf(device string) []int {
	l := s.Layout()
	slots := []int{Slot(device, l.Slots)}
	if old, moved := l.oldSlot(device); moved {
		slots = append(slots, old)
	}
	return slots
}

// Delete stops monitoring device (decommissioned): no event follows. It returns false when the device
// was not known.
func (s *Store) Delete(ctx context.Context, device string) (bool, error) {
	var cmds []*redis.IntCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, slot := range s.slotsOf(device) {
			cmds = append(cmds,
				p.ZRem(ctx, s.keys.Deadlines(slot), device),
				p.ZRem(ctx, s.keys.Alarms(slot), device),
				p.HDel(ctx, s.keys.State(slot), device),
				p.ZRem(ctx, s.keys.Dead(slot), device))
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("deadline: delete %q: %w", device, err)
	}
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	return n > 0, nil
}
