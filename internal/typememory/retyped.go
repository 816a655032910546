package typememory

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// retypedLogSize is how many changes the retyped log keeps; a store that fell further behind forgets all
// it remembers.
const retypedLogSize = 10_000

// retypeScript appends devices to the retyped log and counts them.
// KEYS: log, count. ARGV: the log's size, then the devices.
var retypeScript = redis.NewScript(`
for i = 2, #ARGV do redis.call('LPUSH', KEYS[1], ARGV[i]) end
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[1]) - 1)
return redis.call('INCRBY', KEYS[2], #ARGV - 1)`)

// readRetypedScript returns the log's count and, when it moved past ARGV[1] by at most the log's size,
// the devices added since: one atomic read, so no entry is counted and missed.
// KEYS: log, count. ARGV: the count last seen, the log's size.
var readRetypedScript = redis.NewScript(`
local n = tonumber(redis.call('GET', KEYS[2]) or '0')
local since = n - tonumber(ARGV[1])
if since <= 0 or since > tonumber(ARGV[2]) then return {n} end
local out = redis.call('LRANGE', KEYS[1], 0, since - 1)
table.insert(out, 1, n)
return out`)

// QueueRetyped logs devices whose type the store changed or that it deleted, in pipe, each once: a
// device naming another type in each signal of a batch is one entry of the log, not one per signal.
func (m *Memory) QueueRetyped(ctx context.Context, pipe redis.Pipeliner, devices []string) {
	if len(devices) == 0 {
		return
	}
	args := make([]any, 0, len(devices)+1)
	args = append(args, retypedLogSize)
	var logged map[string]bool // only for a batch with more than one
	for _, d := range devices {
		if len(devices) > 1 {
			if logged[d] {
				continue
			}
			if logged == nil {
				logged = make(map[string]bool, len(devices))
			}
			logged[d] = true
		}
		args = append(args, d)
	}
	retypeScript.Eval(ctx, pipe, []string{m.keys.retyped(), m.keys.retypedCount()}, args...)
}

// QueueCheck reads the log's count in pipe; call the function it returns once pipe ran, and the next
// ApplyRetyped applies what it found.
func (m *Memory) QueueCheck(ctx context.Context, pipe redis.Pipeliner) func() {
	// MGET: a missing key is a nil element, not the error GET's redis.Nil would make of the pipeline.
	cmd := pipe.MGet(ctx, m.keys.retypedCount())
	return func() {
		vals, err := cmd.Result()
		if err != nil || len(vals) != 1 {
			return
		}
		var n int64
		if v, ok := vals[0].(string); ok {
			if n, err = strconv.ParseInt(v, 10, 64); err != nil {
				return
			}
		}
		m.logCount.Store(n)
	}
}

// ApplyRetyped forgets the devices the log named since this memory last applied it, when the last count
// read moved. It runs before a batch uses the memory.
func (m *Memory) ApplyRetyped(ctx context.Context) error {
	seen, count := m.logSeen.Load(), m.logCount.Load()
	if seen >= 0 && count == seen {
		return nil
	}
	if seen < 0 {
		// Nothing remembered yet: start from the count as it is.
		n, err := m.rdb.Get(ctx, m.keys.retypedCount()).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("typememory: retyped log: %w", err)
		}
		m.logSeen.Store(n)
		m.logCount.Store(n)
		return nil
	}
	res, err := readRetypedScript.Run(ctx, m.rdb, []string{m.keys.retyped(), m.keys.retypedCount()}, seen, retypedLogSize).Slice()
	if err != nil {
		return fmt.Errorf("typememory: retyped log: %w", err)
	}
	n, _ := res[0].(int64)
	switch {
	case n-seen > retypedLogSize || n < seen: // fell behind the log, or Redis lost it
		m.ForgetAll()
	default:
		devices := make([]string, 0, len(res)-1)
		for _, v := range res[1:] {
			if d, ok := v.(string); ok {
				devices = append(devices, d)
			}
		}
		m.Forget(devices)
	}
	m.logSeen.Store(n)
	m.logCount.Store(n)
	return nil
}

// Seen is the log's count the memory has applied (-1 before the first ApplyRetyped): a batch that read
// types while it was n remembers them only if it is still n, since a read may predate a change the log
// already made forgotten.
func (m *Memory) Seen() int64 { return m.logSeen.Load() }
