package deadline

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/redisutil"
)

// FlapHistory returns, for each claim where want[i] is true, the times (unix ms, oldest first) of its
// device's last interruptions; one HMGET per slot, one round trip. Others get nil.
func (s *Store) FlapHistory(ctx context.Context, claims []Claim, want []bool) ([][]int64, error) {
	out := make([][]int64, len(claims))
	var idx []int // idx[j]: the claim of devices[j]
	var devices []string
	for i, c := range claims {
		if want[i] {
			idx = append(idx, i)
			devices = append(devices, c.Device)
		}
	}
	if len(devices) == 0 {
		return out, nil
	}
	keyOf := func(j int) string { return s.keys.flaps(claims[idx[j]].Slot) }
	err := redisutil.FieldsByKey(ctx, s.rdb, keyOf, devices, func(j int, v string) { out[idx[j]] = parseFlaps(v) })
	if err != nil {
		return nil, fmt.Errorf("deadline: flap history: %w", err)
	}
	return out, nil
}

func parseFlaps(s string) []int64 {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		if n, err := strconv.ParseInt(f, 10, 64); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// FlapUpdate is a device's new interruption history.
type FlapUpdate struct {
	Device string
	Slot   int
	Times  []int64 // unix ms, oldest first
}

// RecordFlaps stores new interruption histories, one round trip.
func (s *Store) RecordFlaps(ctx context.Context, updates []FlapUpdate) error {
	if len(updates) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	for _, u := range updates {
		b := make([]byte, 0, 14*len(u.Times))
		for i, t := range u.Times {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, t, 10)
		}
		pipe.HSet(ctx, s.keys.flaps(u.Slot), u.Device, string(b))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("deadline: record flaps: %w", err)
	}
	return nil
}

// A device's interruption history lives as long as flapping detection can use it: its entry goes with the
// device (deleteMany, retention) and, once its newest interruption is older than every type's flapping
// window, with the sweep (PruneFlaps): a device that stopped flapping, changed to a type without
// flapping, moved slot in a doubling or was deleted while its claim was being handled leaves nothing
// behind for good.

// pruneFlapsScript deletes the histories whose newest interruption is still before ARGV[1] (ms): one
// written since the sweep read it is kept.
//
// KEYS[1] flaps  ARGV[1] before (ms), then the devices
// Reply: how many it deleted.
var pruneFlapsScript = newScript(`
local before, n = tonumber(ARGV[1]), 0
for i = 2, #ARGV do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if v then
    local newest = tonumber(string.match(v, '(%d+)$') or '0')
    if newest < before then
      n = n + redis.call('HDEL', KEYS[1], ARGV[i])
    end
  end
end
return n
`)

// PruneFlaps looks at one page of slot's flap histories (an HSCAN step from cursor of about count
// fields) and deletes those whose newest interruption is before `before`: flapping detection, which only
// counts interruptions within the window, would never read them again. It returns the next cursor (0 at
// the end) and how many it deleted.
func (s *Store) PruneFlaps(ctx context.Context, slot int, cursor uint64, count int, before time.Time) (uint64, int, error) {
	fields, next, err := s.rdb.HScan(ctx, s.keys.flaps(slot), cursor, "", int64(count)).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("deadline: prune flaps, slot %d: %w", slot, err)
	}
	limit := before.UnixMilli()
	args := []any{limit}
	for i := 0; i+1 < len(fields); i += 2 {
		if t := parseFlaps(fields[i+1]); len(t) == 0 || t[len(t)-1] < limit {
			args = append(args, fields[i])
		}
	}
	if len(args) == 1 {
		return next, 0, nil
	}
	n, err := pruneFlapsScript.Run(ctx, s.rdb, []string{s.keys.flaps(slot)}, args...).Int()
	if err != nil {
		return 0, 0, fmt.Errorf("deadline: prune flaps, slot %d: %w", slot, err)
	}
	return next, n, nil
}
