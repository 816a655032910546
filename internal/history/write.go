package history

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// writeBucket writes the changes of one bucket's devices, each only if its history is still the one its
// fold started from, and with it that device's day figures and open-incident counts: all or nothing, so
// they always match the history they were computed from, whatever a crash or a racing replica does.
//
//	KEYS    the devices' history keys (n), then the keys the ops name (day figures, open counts)
//	ARGV[1] n; then per device: the value read ("" = none), the new one ("" = delete), when it
//	        expires (ms; 0 = never), how many ops follow, and per op: its kind (s: set the field, d:
//	        delete it, i: add to it, deleting it at 0), the index of its key in KEYS, the field, the
//	        value (s) or amount (i), when the key expires (ms; s only)
//	reply   the indexes (1-based) of the devices whose history had changed: not written
var writeBucket = redis.NewScript(`
local n = tonumber(ARGV[1])
local a = 2
local changed = {}
local expiring = {}
for i = 1, n do
  local old, new, expire, ops = ARGV[a], ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3])
  a = a + 4
  local current = redis.call('GET', KEYS[i]) or ''
  if current ~= old then
    changed[#changed + 1] = i
    a = a + 5 * ops
  else
    for _ = 1, ops do
      local kind, key, field = ARGV[a], KEYS[tonumber(ARGV[a + 1])], ARGV[a + 2]
      if kind == 'd' then
        redis.call('HDEL', key, field)
      elseif kind == 'i' then
        if redis.call('HINCRBY', key, field, ARGV[a + 3]) <= 0 then
          redis.call('HDEL', key, field)
        end
      else
        redis.call('HSET', key, field, ARGV[a + 3])
        if not expiring[key] then
          redis.call('PEXPIREAT', key, ARGV[a + 4])
          expiring[key] = true
        end
      end
      a = a + 5
    end
    if old ~= new then
      if new == '' then
        redis.call('DEL', KEYS[i])
      elseif expire == '0' then
        redis.call('SET', KEYS[i], new)
      else
        redis.call('SET', KEYS[i], new, 'PXAT', expire)
      end
    end
  end
end
return changed
`)

// bucketWrite is the arguments of one writeBucket call.
type bucketWrite struct {
	devices []*change
	keys    []string
	dayKeys map[string]int // day key → its index in keys (1-based, as Lua counts)
	args    []any
	ops     []any // the current device's ops
}

// write writes the changes, one writeBucket call per bucket in one pipeline, and remembers what it
// wrote; it returns the devices whose history another writer changed meanwhile.
func (s *Store) write(ctx context.Context, changes []change, now int64) ([]string, error) {
	byBucket := map[int]*bucketWrite{}
	var order []int
	for i := range changes {
		c := &changes[i]
		b := bucketOf(c.device)
		w := byBucket[b]
		if w == nil {
			w = &bucketWrite{dayKeys: map[string]int{}}
			byBucket[b] = w
			order = append(order, b)
		}
		w.devices = append(w.devices, c)
	}
	pipe := s.opts.Client.Pipeline()
	cmds := make([]*redis.Cmd, len(order))
	for k, b := range order {
		w := byBucket[b]
		for _, c := range w.devices {
			w.keys = append(w.keys, s.keys.device(c.device))
		}
		w.args = append(w.args, len(w.devices))
		for _, c := range w.devices {
			c.encodeNew()
			w.ops = w.ops[:0]
			s.dayOps(w, b, c, now)
			var expireAt int64
			if c.newRaw != "" {
				expireAt = s.expireAt(c.new)
			}
			w.args = append(w.args, c.oldRaw, c.newRaw, expireAt, len(w.ops)/5)
			w.args = append(w.args, w.ops...)
		}
		cmds[k] = writeBucket.EvalSha(ctx, pipe, w.keys, w.args...)
	}
	if _, err := pipe.Exec(ctx); err != nil && !redis.HasErrorPrefix(err, "NOSCRIPT") {
		s.cache.drop(devicesOf(changes))
		return nil, fmt.Errorf("history: write: %w", err)
	}
	var retry []string
	for k, b := range order {
		w := byBucket[b]
		failed, err := cmds[k].Int64Slice()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			if err := writeBucket.Load(ctx, s.opts.Client).Err(); err != nil {
				return nil, fmt.Errorf("history: load script: %w", err)
			}
			failed = make([]int64, len(w.devices)) // nothing was written: all go again
			for i := range failed {
				failed[i] = int64(i + 1)
			}
		} else if err != nil {
			return nil, fmt.Errorf("history: write: %w", err)
		}
		skip := map[int64]bool{}
		for _, i := range failed {
			skip[i] = true
			retry = append(retry, w.devices[i-1].device)
		}
		for i, c := range w.devices {
			if skip[int64(i+1)] {
				s.cache.drop([]string{c.device})
			} else {
				s.cache.put(c.device, c.newRaw)
			}
		}
	}
	return retry, nil
}

// dayOps appends to w.ops the writes of one change besides its history: its day figures under its
// group on each day whose figures differ, away from a group it left (or all of them, when deleted), and
// its open incident's count moved when it opened, closed or changed group.
func (s *Store) dayOps(w *bucketWrite, bucket int, c *change, now int64) {
	retention := s.opts.History.Retention.Milliseconds()
	from := now - retention
	before, after := dayFigures(c.old, from), dayFigures(c.new, from)
	op := func(kind, key, field string, value any, expire int64) {
		idx, ok := w.dayKeys[key]
		if !ok {
			w.keys = append(w.keys, key)
			idx = len(w.keys)
			w.dayKeys[key] = idx
		}
		w.ops = append(w.ops, kind, idx, field, value, expire)
	}
	set := func(day int64, dim, field, value string) {
		op("s", s.keys.day(bucket, day, dim), field, value, (day+1)*dayMs+retention)
	}
	del := func(day int64, dim, field string) { op("d", s.keys.day(bucket, day, dim), field, "", 0) }
	for dim, oldValue := range c.old.Groups {
		if c.new.Groups[dim] != oldValue {
			for _, e := range before {
				del(e.day, dim, groupField(oldValue, c.device))
			}
		}
	}
	for dim, value := range c.new.Groups {
		moved := c.old.Groups[dim] != value
		for _, e := range after {
			if was, ok := before.get(e.day); moved || !ok || was != e.dayFigure {
				set(e.day, dim, groupField(value, c.device), e.dayFigure.String())
			}
		}
		if !moved {
			for _, e := range before {
				if _, ok := after.get(e.day); !ok {
					del(e.day, dim, groupField(value, c.device))
				}
			}
		}
	}
	wasOpen, isOpen := c.old.openGroups(), c.new.openGroups()
	for dim := range mergedKeys(wasOpen, isOpen) {
		if was, is := wasOpen[dim], isOpen[dim]; was != is {
			if was != "" {
				op("i", s.keys.open(bucket, dim), was, -1, 0)
			}
			if is != "" {
				op("i", s.keys.open(bucket, dim), is, 1, 0)
			}
		}
	}
}

// openGroups are h's groups while its latest incident is open, else none.
func (h *deviceHistory) openGroups() map[string]string {
	if in := h.latest(); in == nil || !in.Open() {
		return nil
	}
	return h.Groups
}

func mergedKeys(a, b map[string]string) map[string]bool {
	out := make(map[string]bool, len(a)+len(b))
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// encodeNew sets newRaw, the value the change writes: "" deletes the device's history.
func (c *change) encodeNew() {
	c.newRaw = ""
	if len(c.new.Incidents) > 0 {
		c.newRaw = string(encode(c.new))
	}
}

func devicesOf(changes []change) []string {
	out := make([]string, len(changes))
	for i := range changes {
		out[i] = changes[i].device
	}
	return out
}
