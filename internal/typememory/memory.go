package typememory

import (
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/idhash"
)

// Size bounds the devices a Memory remembers (two generations of half as many). An entry is a 16-byte
// slot in a table at most half full, ≈ 16–32 B: ≈ 32–64 MB per generation of 2M devices.
const Size = 1 << 22

// Refresh is how long a remembered type is trusted without reading it again.
const Refresh = 10 * time.Minute

type typeEntry struct {
	index uint16
	until uint32 // unix seconds after which the type is read again; 0: forgotten
}

// Memory is a store's memory of recorded types, by hashes of the device ids, in two generations (like
// the deadline store's cache of parent links), with what it applied of the retyped log. A 64-bit hash
// collision would time one device by another's type until Refresh.
type Memory struct {
	rdb  redis.UniversalClient
	keys keyspace

	mu       sync.Mutex
	cur, old rememberedTypes
	// logSeen is the retyped count this memory has applied; -1 before the first check.
	logSeen atomic.Int64
	// logCount is the count the last refresh round trip read.
	logCount atomic.Int64
}

// New returns an empty memory whose retyped log lives on rdb under prefix (config redis.key_prefix; "" =
// its default).
func New(rdb redis.UniversalClient, prefix string) *Memory {
	m := &Memory{rdb: rdb, keys: newKeyspace(prefix)}
	m.logSeen.Store(-1)
	m.logCount.Store(-1)
	return m
}

// Lookup calls found with, for each device, its position and remembered type index when one is still trusted at
// now (unix seconds); one lock per batch. The devices are hashed a run at a time before their slots are
// read: each read is a cache miss in a large memory, and a loop doing only those keeps several in flight.
func (m *Memory) Lookup(devices iter.Seq2[int, string], now int64, found func(i, index int)) {
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

func (m *Memory) lookupRunLocked(run *lookupRun, now int64, found func(i, index int)) {
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

// Learned is a device's type index as a batch learned it.
type Learned struct {
	Device string
	Index  int
}

// Remember records devices' type indexes, learned at now (unix seconds); one lock per batch.
func (m *Memory) Remember(entries []Learned, now int64) {
	if len(entries) == 0 {
		return
	}
	until := uint32(now + int64(Refresh/time.Second))
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range entries {
		m.putLocked(idhash.Of(e.Device), typeEntry{index: uint16(e.Index), until: until})
	}
}

func (m *Memory) putLocked(k uint64, e typeEntry) {
	if m.cur.n >= Size/2 {
		m.old, m.cur = m.cur, rememberedTypes{}
	}
	m.cur.put(k, e)
}

// Forget makes the memory read devices' types again.
func (m *Memory) Forget(devices []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range devices {
		k := idhash.Of(d)
		m.cur.forget(k)
		m.old.forget(k)
	}
}

// ForgetAll forgets every type: the registry's indexes changed, or the log cannot tell what changed.
func (m *Memory) ForgetAll() {
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
