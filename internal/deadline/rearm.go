package deadline

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Re-arming is how a silence ended early gives back the incidents it deferred (internal/silence): the alarm
// loop scheduled each such incident's next act at exactly the silence's end (internal/alarm/decide.go), so
// an entry of the alarms set scored at that end is one the silence deferred.

// rearmBatch bounds one read of a slot's deferred incidents while a type is re-armed (a variable so tests
// can span several batches with a small fleet).
var rearmBatch = 500

// rearmScript moves the next act of each given incident to ARGV[2] where it is still exactly ARGV[1]:
// an incident the alarm loop holds (leased: scored now + lease) or scheduled for another reason since is
// left alone.
//
// KEYS[1] alarms; ARGV[1] the deferral's end (ms), ARGV[2] the new act time (ms), ARGV[3…] devices.
// Reply: how many moved.
var rearmScript = newScript(`
local moved = 0
local want = tonumber(ARGV[1])
for i = 3, #ARGV do
  local sc = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if sc and tonumber(sc) == want then
    redis.call('ZADD', KEYS[1], ARGV[2], ARGV[i])
    moved = moved + 1
  end
end
return moved`)

// RearmDevice moves device's next act from exactly until to at, in its slot and, while slots double,
// its old one. It returns how many alarm entries moved (0 when the incident is not deferred to until).
func (s *Store) RearmDevice(ctx context.Context, device string, until, at time.Time) (int, error) {
	moved := 0
	for _, slot := range s.slotsOf(device) {
		n, err := s.rearm(ctx, slot, []string{device}, until, at)
		moved += n
		if err != nil {
			return moved, err
		}
	}
	return moved, nil
}

// RearmType moves the next act of every incident of type typ (a device with its own timeout counts as
// its type's) from exactly until to at, reading each slot's entries scored until in bounded batches. It
// returns how many moved.
func (s *Store) RearmType(ctx context.Context, typ string, until, at time.Time) (int, error) {
	score := strconv.FormatInt(until.UnixMilli(), 10)
	moved := 0
	for slot := range s.layouts.Load().Slots {
		for offset := int64(0); ; {
			members, err := s.rdb.ZRangeByScore(ctx, s.keys.alarms(slot), &redis.ZRangeBy{Min: score, Max: score,
				Offset: offset, Count: int64(rearmBatch)}).Result()
			if err != nil {
				return moved, fmt.Errorf("deadline: re-arm slot %d: %w", slot, err)
			}
			if len(members) == 0 {
				break
			}
			ours, err := s.incidentsOfType(ctx, slot, members, typ)
			if err != nil {
				return moved, err
			}
			if len(ours) > 0 {
				n, err := s.rearm(ctx, slot, ours, until, at)
				moved += n
				if err != nil {
					return moved, err
				}
			}
			// Moved incidents left the range; the others are still in it, so the next page skips them.
			offset += int64(len(members) - len(ours))
			if len(members) < rearmBatch {
				break
			}
		}
	}
	return moved, nil
}

// incidentsOfType keeps the members of slot's alarms set that are incidents of type typ. Members without
// a state are in-flight records' leases, not incidents.
func (s *Store) incidentsOfType(ctx context.Context, slot int, members []string, typ string) ([]string, error) {
	states, err := s.rdb.HMGet(ctx, s.keys.state(slot), members...).Result()
	if err != nil {
		return nil, fmt.Errorf("deadline: re-arm slot %d: %w", slot, err)
	}
	var ours []string
	for i, v := range states {
		if str, ok := v.(string); ok {
			st, err := decodeState(str)
			if err == nil && func() bool { t, _ := s.typeOf(ctx, st.TypeIndex); return t == typ }() {
				ours = append(ours, members[i])
			}
		}
	}
	return ours, nil
}

// rearm runs rearmScript on slot's alarms set for devices.
func (s *Store) rearm(ctx context.Context, slot int, devices []string, until, at time.Time) (int, error) {
	args := make([]any, 0, 2+len(devices))
	args = append(args, until.UnixMilli(), at.UnixMilli())
	for _, d := range devices {
		args = append(args, d)
	}
	n, err := rearmScript.Run(ctx, s.rdb, []string{s.keys.alarms(slot)}, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("deadline: re-arm slot %d: %w", slot, err)
	}
	return n, nil
}
