package flaps

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/redisutil"
)

// Histories are the devices' interruption histories on one Redis (standalone or Cluster).
type Histories struct {
	rdb  redis.UniversalClient
	keys keyspace
}

// New returns the histories on rdb under prefix (config redis.key_prefix; "" = its default).
func New(rdb redis.UniversalClient, prefix string) *Histories {
	return &Histories{rdb: rdb, keys: newKeyspace(prefix)}
}

// Device is a device in its slot, whose history is kept in the slot's hash.
type Device struct {
	ID   string
	Slot int
}

// History returns, for each device where want[i] is true, the times (unix ms, oldest first) of its
// last interruptions; one HMGET per slot, one round trip. Others get nil.
func (h *Histories) History(ctx context.Context, devices []Device, want []bool) ([][]int64, error) {
	out := make([][]int64, len(devices))
	var idx []int // idx[j]: the device of ids[j]
	var ids []string
	for i, d := range devices {
		if want[i] {
			idx = append(idx, i)
			ids = append(ids, d.ID)
		}
	}
	if len(ids) == 0 {
		return out, nil
	}
	keyOf := func(j int) string { return h.keys.flaps(devices[idx[j]].Slot) }
	err := redisutil.FieldsByKey(ctx, h.rdb, keyOf, ids, func(j int, v string) { out[idx[j]] = parseFlaps(v) })
	if err != nil {
		return nil, fmt.Errorf("flaps: history: %w", err)
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

// Update is a device's new interruption history.
type Update struct {
	Device string
	Slot   int
	Times  []int64 // unix ms, oldest first
}

// Record stores new interruption histories, one round trip.
func (h *Histories) Record(ctx context.Context, updates []Update) error {
	if len(updates) == 0 {
		return nil
	}
	pipe := h.rdb.Pipeline()
	for _, u := range updates {
		b := make([]byte, 0, 14*len(u.Times))
		for i, t := range u.Times {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, t, 10)
		}
		pipe.HSet(ctx, h.keys.flaps(u.Slot), u.Device, string(b))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("flaps: record: %w", err)
	}
	return nil
}

// A device's interruption history lives as long as flapping detection can use it: its entry goes with the
// device (QueueDelete: internal/deadline's deletes, retention) and, once its newest interruption is
// older than every type's flapping window, with the sweep (Prune): a device that stopped flapping, changed to a type without
// flapping, moved slot in a doubling or was deleted while its claim was being handled leaves nothing
// behind for good.

// pruneFlapsScript deletes the histories whose newest interruption is still before ARGV[1] (ms): one
// written since the sweep read it is kept.
//
// KEYS[1] flaps  ARGV[1] before (ms), then the devices
// Reply: how many it deleted.
var pruneFlapsScript = redis.NewScript(`
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

// Prune looks at one page of slot's flap histories (an HSCAN step from cursor of about count
// fields) and deletes those whose newest interruption is before `before`: flapping detection, which only
// counts interruptions within the window, would never read them again. It returns the next cursor (0 at
// the end) and how many it deleted.
func (h *Histories) Prune(ctx context.Context, slot int, cursor uint64, count int, before time.Time) (uint64, int, error) {
	fields, next, err := h.rdb.HScan(ctx, h.keys.flaps(slot), cursor, "", int64(count)).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("flaps: prune, slot %d: %w", slot, err)
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
	n, err := pruneFlapsScript.Run(ctx, h.rdb, []string{h.keys.flaps(slot)}, args...).Int()
	if err != nil {
		return 0, 0, fmt.Errorf("flaps: prune, slot %d: %w", slot, err)
	}
	return next, n, nil
}

// QueueDelete queues the deletion of device's history in slot in pipe: it goes with the device.
func (h *Histories) QueueDelete(ctx context.Context, pipe redis.Pipeliner, slot int, device string) {
	pipe.HDel(ctx, h.keys.flaps(slot), device)
}
