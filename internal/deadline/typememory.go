package deadline

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/idhash"
)

// A signal without a type (the common MQTT heartbeat) is timed by the type recorded for its device, in
// the low bits of its deadline score. Reading that score costs a round trip and ≈ 0.5 µs of Redis per
// signal, more than the write itself in a periodic fleet, so each Store remembers the types it read and
// wrote: an untyped signal of a remembered device is written as if it named its type.
//
// Another replica may change a device's type (a typed signal, a delete). A store that changes the type of
// a device, or deletes one, appends the device to the retyped log, and every store checks the log's
// counter in each refresh round trip, forgetting the devices named since it last looked: a change reaches
// the other replicas within one of their batches. Changes the log cannot tell (Redis lost its data, a
// replica of an older version) are bounded by typeMemoryRefresh, after which a device's type is read
// again.

// typeMemorySize bounds the devices a Store remembers (two generations of half as many). An entry is a
// 16-byte slot in a table at most half full, ≈ 16–32 B: ≈ 32–64 MB per generation of 2M devices.
const typeMemorySize = 1 << 22

// typeMemoryRefresh is how long a remembered type is trusted without reading it again.
const typeMemoryRefresh = 10 * time.Minute

// retypedLogSize is how many changes the retyped log keeps; a store that fell further behind forgets all
// it remembers.
const retypedLogSize = 10_000

// retyped is the list of devices whose type changed or that were deleted, newest first, and retypedCount
// the number of entries ever added to it. Both share a hash tag, so a script updates them together on
// Redis Cluster.
func (k Keyspace) retyped() string      { return k.prefix + ":{retyped}" }
func (k Keyspace) retypedCount() string { return k.prefix + ":{retyped}:count" }

type typeEntry struct {
	index uint16
	until uint32 // unix seconds after which the type is read again; 0: forgotten
}

// typeMemory is a Store's memory of recorded types, by hashes of the device ids, in two generations like
// linkCache. A 64-bit hash collision would time one device by another's type until typeMemoryRefresh.
type typeMemory struct {
	mu       sync.Mutex
	cur, old rememberedTypes
	// logSeen is the retyped count this memory has applied; -1 before the first check.
	logSeen atomic.Int64
	// logCount is the count the last refresh round trip read.
	logCount atomic.Int64
}

func newTypeMemory() *typeMemory {
	m := &typeMemory{}
	m.logSeen.Store(-1)
	m.logCount.Store(-1)
	return m
}

// lookup returns, for each device, its remembered type index and whether there is one still trusted at
// now (unix seconds); one lock per batch. The devices are hashed a run at a time before their slots are
// read: each read is a cache miss in a large memory, and a loop doing only those keeps several in flight.
func (m *typeMemory) lookup(devices iter.Seq2[int, string], now int64, found func(i, index int)) {
	var run lookupRun
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, device := range devices {
		run.at[run.n], run.keys[run.n] = i, idhash.Of(device)
		if run.n++; run.n == len(run.keys) {
			m.lookupRunLocked(&run, now, found)
		}
	}
	m.lookupRunLocked(&run, now, found)
}

// lookupRun is a run of hashed devices waiting for their slots to be read: their positions and keys.
type lookupRun struct {
	at   [256]int
	keys [256]uint64
	n    int
}

func (m *typeMemory) lookupRunLocked(run *lookupRun, now int64, found func(i, index int)) {
	var entries [len(run.keys)]typeEntry
	var ok [len(run.keys)]bool
	for j, k := range run.keys[:run.n] {
		entries[j], ok[j] = m.cur.get(k)
	}
	for j, k := range run.keys[:run.n] {
		e := entries[j]
		if !ok[j] {
			if e, ok[j] = m.old.get(k); ok[j] && now < int64(e.until) {
				m.putLocked(k, e)
			}
		}
		if ok[j] && now < int64(e.until) {
			found(run.at[j], int(e.index))
		}
	}
	run.n = 0
}

// remember records devices' type indexes, learned at now (unix seconds); one lock per batch.
func (m *typeMemory) remember(entries []learnedType, now int64) {
	if len(entries) == 0 {
		return
	}
	until := uint32(now + int64(typeMemoryRefresh/time.Second))
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range entries {
		m.putLocked(idhash.Of(e.device), typeEntry{index: uint16(e.index), until: until})
	}
}

func (m *typeMemory) putLocked(k uint64, e typeEntry) {
	if m.cur.n >= typeMemorySize/2 {
		m.old, m.cur = m.cur, rememberedTypes{}
	}
	m.cur.put(k, e)
}

func (m *typeMemory) forget(devices []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range devices {
		k := idhash.Of(d)
		m.cur.forget(k)
		m.old.forget(k)
	}
}

func (m *typeMemory) forgetAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cur, m.old = rememberedTypes{}, rememberedTypes{}
}

// rememberedTypes is an open-addressing hash table with linear probing, grown at half full: a lookup reads
// one 16-byte slot, mostly one cache line, where a Go map reads its control word and slot apart, and at
// 1M devices each is a cache miss. Nothing is deleted: a forgotten entry has until 0.
type rememberedTypes struct {
	slots []rememberedSlot
	n     int
}

type rememberedSlot struct {
	key uint64 // 0: empty (a hash of 0 is kept as 1)
	typeEntry
}

func (t *rememberedTypes) get(k uint64) (typeEntry, bool) {
	if t.n == 0 {
		return typeEntry{}, false
	}
	k = max(k, 1)
	mask := uint64(len(t.slots) - 1)
	for i := k & mask; ; i = (i + 1) & mask {
		switch t.slots[i].key {
		case k:
			return t.slots[i].typeEntry, true
		case 0:
			return typeEntry{}, false
		}
	}
}

// put sets k's entry.
func (t *rememberedTypes) put(k uint64, e typeEntry) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	k = max(k, 1)
	mask := uint64(len(t.slots) - 1)
	for i := k & mask; ; i = (i + 1) & mask {
		switch t.slots[i].key {
		case k:
			t.slots[i].typeEntry = e
			return
		case 0:
			t.slots[i] = rememberedSlot{key: k, typeEntry: e}
			t.n++
			return
		}
	}
}

// forget keeps k's slot, so the keys probing past it stay reachable, and makes its entry untrusted.
func (t *rememberedTypes) forget(k uint64) {
	if t.n == 0 {
		return
	}
	k = max(k, 1)
	mask := uint64(len(t.slots) - 1)
	for i := k & mask; t.slots[i].key != 0; i = (i + 1) & mask {
		if t.slots[i].key == k {
			t.slots[i].until = 0
			return
		}
	}
}

func (t *rememberedTypes) grow() {
	old := t.slots
	t.slots, t.n = make([]rememberedSlot, max(1024, 2*len(old))), 0
	for _, s := range old {
		if s.key != 0 {
			t.put(s.key, s.typeEntry)
		}
	}
}

// retypeScript appends devices to the retyped log and counts them.
// KEYS: log, count. ARGV: the log's size, then the devices.
var retypeScript = newScript(`
for i = 2, #ARGV do redis.call('LPUSH', KEYS[1], ARGV[i]) end
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[1]) - 1)
return redis.call('INCRBY', KEYS[2], #ARGV - 1)`)

// readRetypedScript returns the log's count and, when it moved past ARGV[1] by at most the log's size,
// the devices added since: one atomic read, so no entry is counted and missed.
// KEYS: log, count. ARGV: the count last seen, the log's size.
var readRetypedScript = newScript(`
local n = tonumber(redis.call('GET', KEYS[2]) or '0')
local since = n - tonumber(ARGV[1])
if since <= 0 or since > tonumber(ARGV[2]) then return {n} end
local out = redis.call('LRANGE', KEYS[1], 0, since - 1)
table.insert(out, 1, n)
return out`)

// queueRetyped logs devices whose type this store changed or that it deleted, in pipe, each once: a
// device naming another type in each signal of a batch is one entry of the log, not one per signal.
func (s *Store) queueRetyped(ctx context.Context, pipe redis.Pipeliner, devices []string) {
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
	retypeScript.Eval(ctx, pipe, []string{s.keys.retyped(), s.keys.retypedCount()}, args...)
}

// queueRetypedCheck reads the log's count in pipe; the next refresh applies what it finds.
func (s *Store) queueRetypedCheck(ctx context.Context, pipe redis.Pipeliner) func() {
	// MGET: a missing key is a nil element, not the error GET's redis.Nil would make of the pipeline.
	cmd := pipe.MGet(ctx, s.keys.retypedCount())
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
		s.typeMem.logCount.Store(n)
	}
}

// applyRetyped forgets the devices the log named since this store last applied it, when the last count
// read moved. It runs before a batch uses the memory.
func (s *Store) applyRetyped(ctx context.Context) error {
	m := s.typeMem
	seen, count := m.logSeen.Load(), m.logCount.Load()
	if seen >= 0 && count == seen {
		return nil
	}
	if seen < 0 {
		// Nothing remembered yet: start from the count as it is.
		n, err := s.rdb.Get(ctx, s.keys.retypedCount()).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("deadline: retyped log: %w", err)
		}
		m.logSeen.Store(n)
		m.logCount.Store(n)
		return nil
	}
	res, err := readRetypedScript.Run(ctx, s.rdb, []string{s.keys.retyped(), s.keys.retypedCount()}, seen, retypedLogSize).Slice()
	if err != nil {
		return fmt.Errorf("deadline: retyped log: %w", err)
	}
	n, _ := res[0].(int64)
	switch {
	case n-seen > retypedLogSize || n < seen: // fell behind the log, or Redis lost it
		m.forgetAll()
	default:
		devices := make([]string, 0, len(res)-1)
		for _, v := range res[1:] {
			if d, ok := v.(string); ok {
				devices = append(devices, d)
			}
		}
		m.forget(devices)
	}
	m.logSeen.Store(n)
	m.logCount.Store(n)
	return nil
}
