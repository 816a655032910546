package deadline

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"
)

// Parked is a claim in a slot's dead set: Kafka refused its events for their content too often (Park).
// Its incident keeps its state and has no act until Requeue.
type Parked struct {
	Device string
	Slot   int
	At     time.Time // when it was parked
	Reason string    // the last publish failure
}

// ParkedClaims returns up to limit parked claims, the longest parked first, with the reason each was
// parked: what /v1/stats shows besides the count (Counts.Parked). Two round trips of one command per
// slot, whatever the dead sets hold.
func (s *Store) ParkedClaims(ctx context.Context, limit int) ([]Parked, error) {
	if limit <= 0 {
		return nil, nil
	}
	slots := s.Slots()
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.ZSliceCmd, slots)
	for slot := range cmds {
		cmds[slot] = pipe.ZRangeWithScores(ctx, s.keys.dead(slot), 0, int64(limit-1))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("deadline: parked claims: %w", err)
	}
	var out []Parked
	for slot, cmd := range cmds {
		for _, z := range cmd.Val() {
			dev, _ := z.Member.(string)
			out = append(out, Parked{Device: dev, Slot: slot, At: time.UnixMilli(int64(z.Score))})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].At.Equal(out[j].At) {
			return out[i].At.Before(out[j].At)
		}
		return out[i].Device < out[j].Device
	})
	out = out[:min(len(out), limit)]
	if len(out) == 0 {
		return nil, nil
	}
	pipe = s.rdb.Pipeline()
	states := make([]*redis.StringCmd, len(out))
	for i, p := range out {
		states[i] = pipe.HGet(ctx, s.keys.state(p.Slot), p.Device)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("deadline: parked claims: %w", err)
	}
	for i, cmd := range states {
		if st, err := decodeState(cmd.Val()); err == nil {
			out[i].Reason = st.Reason
		}
	}
	return out, nil
}

// requeueScript moves up to a page of a slot's parked claims back to its alarms set, due now.
//
// KEYS[1] dead  KEYS[2] alarms  KEYS[3] state
// ARGV[1] now (ms)  ARGV[2] page
// Reply: {claims made due, claims left parked}
//
// A parked claim's incident keeps its full state; its failure count starts again from zero, so a claim
// re-driven after its cause was fixed gets the whole max_publish_attempts once more. An entry whose
// incident ended meanwhile (recovered, deleted) only leaves the dead set.
var requeueScript = newScript(`
${luaPieces}
local now, page = ARGV[1], tonumber(ARGV[2])
local parked = redis.call('ZRANGE', KEYS[1], 0, page - 1)
if #parked == 0 then return {0, 0} end
local states = gather(parked, function(...) return redis.call('HMGET', KEYS[3], ...) end)
local due, hset = {}, {}
for i, m in ipairs(parked) do
  local st = states[i]
  if st then
    due[#due+1] = now
    due[#due+1] = m
    hset[#hset+1] = m
    hset[#hset+1] = (string.gsub(st, ${stateFailuresPattern}, ${stateNoFailures}))
  end
end
pieces(parked, 1, function(...) redis.call('ZREM', KEYS[1], ...) end)
pieces(hset, 2, function(...) redis.call('HSET', KEYS[3], ...) end)
pieces(due, 2, function(...) redis.call('ZADD', KEYS[2], ...) end)
return {#due / 2, redis.call('ZCARD', KEYS[1])}
`)

// requeuePage bounds one requeueScript call, which blocks Redis for its length.
const requeuePage = 1000

// Requeue moves every parked claim of every slot back to due now (POST /v1/dead/requeue): the slot's
// owner claims them at its next wake-up and publishes them again. It returns how many it moved.
func (s *Store) Requeue(ctx context.Context) (int, error) {
	now := s.now().UnixMilli()
	pipe := s.rdb.Pipeline()
	sizes := make([]*redis.IntCmd, s.Slots())
	for slot := range sizes {
		sizes[slot] = pipe.ZCard(ctx, s.keys.dead(slot))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("deadline: requeue: %w", err)
	}
	total := 0
	for slot, size := range sizes {
		keys := []string{s.keys.dead(slot), s.keys.alarms(slot), s.keys.state(slot)}
		for left := size.Val(); left > 0; {
			r, err := requeueScript.Run(ctx, s.rdb, keys, now, requeuePage).Int64Slice()
			if err == nil && len(r) != 2 {
				err = fmt.Errorf("reply %v: want {moved, left}", r)
			}
			if err != nil {
				return total, fmt.Errorf("deadline: requeue slot %d: %w", slot, err)
			}
			total += int(r[0])
			left = r[1]
		}
	}
	return total, nil
}

// wakeParkedScript moves the parked claims of devices that signalled again back to the alarms set, due
// now, their failure count cleared: the scanner then reports the recovery (or ends quietly an incident
// whose interruption never went out), as it would have without the refusal.
//
// KEYS[1] dead  KEYS[2] alarms  KEYS[3] state
// ARGV[1] now (ms), then the devices
// Reply: how many claims it made due.
var wakeParkedScript = newScript(`
local n = 0
for i = 2, #ARGV do
  local m = ARGV[i]
  if redis.call('ZREM', KEYS[1], m) == 1 then
    local st = redis.call('HGET', KEYS[3], m)
    if st then
      redis.call('HSET', KEYS[3], m, (string.gsub(st, ${stateFailuresPattern}, ${stateNoFailures})))
      redis.call('ZADD', KEYS[2], ARGV[1], m)
      n = n + 1
    end
  end
end
return n
`)

// WakeParked looks over one page of slot's parked claims (a ZSCAN step from cursor reading about count)
// and makes due those whose device signalled again, so a parked claim recovers on its device's next
// signal within one sweep, not only when an operator re-drives it. It returns the next page's cursor (0
// when the slot is done) and how many claims it made due.
func (s *Store) WakeParked(ctx context.Context, slot int, cursor uint64, count int) (next uint64, woken int, err error) {
	entries, next, err := s.rdb.ZScan(ctx, s.keys.dead(slot), cursor, "", int64(count)).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("deadline: parked claims of slot %d: %w", slot, err)
	}
	parked := make([]string, 0, len(entries)/2)
	for i := 0; i+1 < len(entries); i += 2 {
		parked = append(parked, entries[i])
	}
	back, err := s.backInDeadlines(ctx, slot, parked)
	if err != nil || len(back) == 0 {
		return next, 0, err
	}
	args := append([]any{s.now().UnixMilli()}, back...)
	n, err := wakeParkedScript.Run(ctx, s.rdb, []string{s.keys.dead(slot), s.keys.alarms(slot), s.keys.state(slot)}, args...).Int()
	if err != nil {
		return 0, 0, fmt.Errorf("deadline: wake parked claims of slot %d: %w", slot, err)
	}
	return next, n, nil
}
