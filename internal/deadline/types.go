package deadline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// MaxTypes is how many type names fit in the 10 bits folded into each deadline score
// (score = deadline_ms × MaxTypes + type index; exact in a float64 until the year 2248). Folding the type
// into the score keeps a refresh a single ZADD and costs no memory per device, where a hash field per
// device would (docs/benchmarks.md). The scripts read it from here (scripts.go).
const MaxTypes = 1024

// DefaultType always has index 0, so a device whose type was never recorded resolves to it.
const DefaultType = "default"

// registerTypeScript gives name the index after the highest one taken, or returns the one it has. Not
// the count of names: a registry restored after a loss (typeRegistry.restore) may have gaps. Past the
// last index it takes the lowest one neither a name nor a retired mark holds: one a reclaim released
// (typereclaim.go).
//
// KEYS[1] type registry hash
// ARGV[1] type name  ARGV[2] the name an older version registered it under ("" when none may stand for
// it): its index, when it has one (typeidentity.go, legacyLead)
// Reply: {the index, or -1 when the registry is full; 1 when it is ARGV[2]'s}.
var registerTypeScript = newScript(`
local i = redis.call('HGET', KEYS[1], ARGV[1])
if i then return {tonumber(i), 0} end
if ARGV[2] ~= '' then
  i = redis.call('HGET', KEYS[1], ARGV[2])
  if i then return {tonumber(i), 1} end
end
if redis.call('HEXISTS', KEYS[1], ${DefaultType}) == 0 then
  redis.call('HSET', KEYS[1], ${DefaultType}, 0)
  if ARGV[1] == ${DefaultType} then return {0, 0} end
end
local all = redis.call('HGETALL', KEYS[1])
local taken, n = {}, 0
for j = 1, #all, 2 do
  if string.byte(all[j]) ~= ${typeFieldMarkByte} then
    local v = tonumber(all[j+1])
    taken[v], n = true, math.max(n, v + 1)
  elseif string.sub(all[j], 1, #${typeRetiredField}) == ${typeRetiredField} then
    taken[tonumber(string.sub(all[j], #${typeRetiredField} + 1))] = true
  end
end
if n >= ${MaxTypes} then
  n = nil
  for v = 1, ${MaxTypes} - 1 do
    if not taken[v] then n = v break end
  end
  if not n then return {-1, 0} end
end
redis.call('HSET', KEYS[1], ARGV[1], n)
return {n, 0}
`)

// typeRegistry maps type names to the small indexes stored in scores, shared by every replica through
// one Redis hash and cached here. A registry name is a recorded name and the lead its scores are written
// with (typeidentity.go); it never changes index while registered. Only configured names (the last Load)
// and the per-device timeout names are registered: device type names are not trusted to grow Redis or
// this cache, so any other name resolves to the default type's.
type typeRegistry struct {
	rdb redis.UniversalClient
	key string

	mu         sync.RWMutex
	byName     map[string]int          // every registry name the registry holds (at most MaxTypes)
	byIdx      map[int]string          // the same, by index
	currentOf  map[string]currentIndex // recorded name → the index it is written with now
	configured map[string]bool         // the names of the last Load; nil before it (then every name is unknown)
	// perDevice are the per-device timeout names ("<type>@<timeout>", registry.go) the operator
	// registered; they survive a Load.
	perDevice map[string]bool
	// version is the registry's version (typeVersionField) the cache was rebuilt at.
	version atomic.Int64
	// byRecorded is, by type index, what a signal of the type recorded there resolves to (its recorded
	// name's current index), so an untyped signal costs one lookup; nil or zero entries: not yet asked.
	// Cleared whenever the names that resolve change (a Load, a per-device name, a rebuild).
	byRecorded []resolved
}

func newTypeRegistry(rdb redis.UniversalClient, key string) *typeRegistry {
	return &typeRegistry{rdb: rdb, key: key, byName: map[string]int{DefaultType: 0}, byIdx: map[int]string{0: DefaultType},
		currentOf: map[string]currentIndex{}}
}

// configure sets the configured names: from now on only they resolve to their own index (Load).
func (r *typeRegistry) configure(names []string) {
	set := make(map[string]bool, len(names)+1)
	set[DefaultType] = true
	for _, n := range names {
		set[n] = true
	}
	r.mu.Lock()
	r.configured = set
	r.byRecorded = nil
	r.mu.Unlock()
}

// ErrTypesFull refuses a per-device timeout that would need a type index when all MaxTypes are taken:
// its device would otherwise be timed as the default type without a word.
var ErrTypesFull = fmt.Errorf("deadline: the type registry is full (%d configured types and distinct per-device timeouts)", MaxTypes)

// allow lets a per-device timeout name resolve to its own index under lead, registering it in Redis;
// ErrTypesFull when no index is left for it.
func (r *typeRegistry) allow(ctx context.Context, name string, lead time.Duration) (int, error) {
	i, full, err := r.current(ctx, name, lead)
	if err != nil {
		return 0, err
	}
	if full {
		return 0, fmt.Errorf("%w: no index for %q", ErrTypesFull, name)
	}
	r.mu.Lock()
	if r.perDevice == nil {
		r.perDevice = map[string]bool{}
	}
	if !r.perDevice[name] {
		r.perDevice[name] = true
		r.byRecorded = nil
	}
	r.mu.Unlock()
	return i, nil
}

// cached is name's current index as last resolved (cached), and whether name is known: one lock for
// both, on the signal path.
func (r *typeRegistry) cached(name string) (c currentIndex, known, cached bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	c, cached = r.currentOf[name]
	return c, name != "" && (r.configured[name] || r.perDevice[name]), cached
}

// current returns the index recorded name is written with under lead, registering its registry name
// when the lead is new. A full registry gives the default type's index (full): a configured type's
// devices keep being watched, under the default policy; a per-device timeout is refused (allow).
func (r *typeRegistry) current(ctx context.Context, name string, lead time.Duration) (idx int, full bool, err error) {
	r.mu.RLock()
	c, ok := r.currentOf[name]
	r.mu.RUnlock()
	if ok && c.lead == lead {
		return c.idx, c.full, nil
	}
	alias := ""
	if own, ok := legacyLead(name); ok && own == lead {
		alias = name // registered by an older version, under the same lead
	}
	if idx, full, err = r.register(ctx, timedName(name, lead), alias); err != nil {
		return 0, false, err
	}
	if full && name != DefaultType {
		r.mu.RLock()
		d, ok := r.currentOf[DefaultType]
		r.mu.RUnlock()
		if ok {
			idx = d.idx
		}
	}
	r.mu.Lock()
	r.currentOf[name] = currentIndex{lead: lead, idx: idx, full: full}
	r.mu.Unlock()
	return idx, full, nil
}

// register gives registry name an index in Redis (or reads the one it has, or alias's: the name an
// older version registered it under, "" for none) and caches it; full is true (index 0) when none is
// left.
func (r *typeRegistry) register(ctx context.Context, name, alias string) (idx int, full bool, err error) {
	r.mu.RLock()
	i, ok := r.byName[name]
	if !ok && alias != "" {
		i, ok = r.byName[alias]
	}
	r.mu.RUnlock()
	if ok {
		return i, false, nil
	}
	res, err := registerTypeScript.Run(ctx, r.rdb, []string{r.key}, name, alias).Int64Slice()
	if err != nil || len(res) != 2 {
		return 0, false, fmt.Errorf("deadline: register type %q: %w (reply %v)", name, err, res)
	}
	n := int(res[0])
	if n < 0 {
		return 0, true, nil
	}
	if res[1] == 1 {
		name = alias
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byName[name] = n
	r.byIdx[n] = name
	return n, false, nil
}

// name returns the recorded name of idx (its registry name without the lead), reloading the registry
// when another replica registered it.
func (r *typeRegistry) name(ctx context.Context, idx int) string {
	full := r.fullName(ctx, idx)
	if i := strings.LastIndexByte(full, timedSep[0]); i >= 0 { // what splitTimed cuts, without parsing the lead
		return full[:i]
	}
	return full
}

// fullName is idx's registry name; the default type's for an index nobody registered.
func (r *typeRegistry) fullName(ctx context.Context, idx int) string {
	r.mu.RLock()
	n, ok := r.byIdx[idx]
	r.mu.RUnlock()
	if ok {
		return n
	}
	if err := r.reload(ctx); err == nil {
		r.mu.RLock()
		n, ok = r.byIdx[idx]
		r.mu.RUnlock()
		if ok {
			return n
		}
	}
	return DefaultType
}

// restore writes back every name this registry knows under its index: Redis lost the registry, and
// the scores written since still carry these indexes.
func (r *typeRegistry) restore(ctx context.Context) error {
	r.mu.RLock()
	pairs := make([]any, 0, 2*len(r.byIdx))
	for i, name := range r.byIdx {
		pairs = append(pairs, name, i)
	}
	r.mu.RUnlock()
	if _, err := setMissing(ctx, r.rdb, r.key, pairs); err != nil {
		return fmt.Errorf("deadline: restore type registry: %w", err)
	}
	return nil
}

// reload adds the names other replicas registered to the cache.
func (r *typeRegistry) reload(ctx context.Context) error {
	all, err := r.rdb.HGetAll(ctx, r.key).Result()
	if err != nil {
		return fmt.Errorf("deadline: load type registry: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addLocked(all)
	return nil
}

// rebuild replaces the cache with the registry as it is at version: freed names go, and every name's
// current index is looked up again.
func (r *typeRegistry) rebuild(ctx context.Context, version int64) error {
	all, err := r.rdb.HGetAll(ctx, r.key).Result()
	if err != nil {
		return fmt.Errorf("deadline: load type registry: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byName, r.byIdx, r.currentOf = map[string]int{DefaultType: 0}, map[int]string{0: DefaultType}, map[string]currentIndex{}
	r.byRecorded = nil
	r.addLocked(all)
	r.version.Store(version)
	return nil
}

func (r *typeRegistry) addLocked(all map[string]string) {
	for name, v := range all {
		i, err := strconv.Atoi(v)
		if err != nil || strings.HasPrefix(name, typeFieldMark) || i < 0 || i >= MaxTypes {
			continue
		}
		r.byName[name] = i
		r.byIdx[i] = name
	}
}

// count is how many names the registry holds, as far as this replica knows.
func (r *typeRegistry) count() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.byName)
}

// configuredNames are the names of the last Load.
func (r *typeRegistry) configuredNames() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.configured))
	for name := range r.configured {
		out = append(out, name)
	}
	return out
}

// AsStored is a duration as the scripts hold it: whole milliseconds, never negative.
func AsStored(d time.Duration) time.Duration { return max(d, 0).Truncate(time.Millisecond) }

// byIndex returns fn (a duration per type name) AsStored for every known type index; an index this
// replica does not know yet gets the default type's.
func (r *typeRegistry) byIndex(fn func(string) time.Duration) typeTable {
	names := r.names()
	t := make(typeTable, len(names))
	for i, name := range names {
		if name == "" {
			name = DefaultType
		}
		t[i] = AsStored(fn(name))
	}
	return t
}

// mayHold reports whether a device can be listed under base type name: the registry holds the name, or
// a per-device timeout name of it. Devices of names it never held are recorded under the default type.
func (r *typeRegistry) mayHold(name string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for full := range r.byName {
		if n, _, _ := splitTimed(full); n == name || strings.HasPrefix(n, name+ownTypeSep) {
			return true
		}
	}
	return false
}

// names returns every known recorded name at its index, "" at an index this replica does not know.
func (r *typeRegistry) names() []string {
	out := r.fullNames()
	for i, full := range out {
		out[i], _, _ = splitTimed(full)
	}
	return out
}

// fullNames returns every known registry name at its index, "" at an index this replica does not know.
func (r *typeRegistry) fullNames() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	maxIdx := 0
	for i := range r.byIdx {
		maxIdx = max(maxIdx, i)
	}
	out := make([]string, maxIdx+1)
	for i, name := range r.byIdx {
		out[i] = name
	}
	return out
}

// LongestTimeout is the longest timeout of any type name the registry holds, per-device timeouts
// included.
func (s *Store) LongestTimeout() time.Duration {
	var longest time.Duration
	for _, name := range s.types.names() {
		if name != "" {
			longest = max(longest, s.timeout(name))
		}
	}
	return longest
}

// typeTable is a duration per type index.
type typeTable []time.Duration

// of returns the value of type index idx, the default type's for an index out of the table.
func (t typeTable) of(idx int) time.Duration {
	if idx < 0 || idx >= len(t) {
		return t[0]
	}
	return t[idx]
}

// render writes the table for a script, comma-separated by type index, each value through format; when
// every type has the same value it writes that one value, which the scripts then apply without a lookup
// per device.
func (t typeTable) render(format func(time.Duration) string) string {
	uniform := true
	for _, v := range t {
		uniform = uniform && v == t[0]
	}
	if uniform {
		return format(t[0])
	}
	var b strings.Builder
	for i, v := range t {
		if i > 0 {
			b.WriteString(listSep)
		}
		b.WriteString(format(v))
	}
	return b.String()
}

// millis renders a duration in ms, as the refresh script reads timeouts.
func millis(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// Late reports, aligned with signals, which are late: their deadline — Seen plus the timeout of their
// type (the signal's, else the one recorded for the device, else the default) — had passed when they were
// received (received[i]; nil: now), so they prove nothing about now (docs/signals.md). Written, such a signal
// would put an already due deadline back, and an interrupted device would report `recovered` and a new
// `interrupted` at once. Judged at receipt, not at the write: a signal held through heartbeatd's own
// outage (Redis refusing writes) is the device's true last word, and the hold-back covers the gap. The
// reply is nil when none is late. Only an untyped signal older than the shortest timeout and younger
// than the longest costs a read: one round trip for the batch, for the types recorded.
//
// A late signal of a device Redis does not know at all is the exception, while its deadline passed at
// most LateFirstWord before it was received: it may be the only word of a device that died while its
// signals waited in a blind window (a dead replica's Kafka partitions, a consumer behind), and dropped,
// that device would never be known, so never reported. Written, its deadline is already due: the device
// is reported interrupted, with nothing to recover or reopen. Telling costs one more round trip, only
// for a batch with late signals whose device was not read already.
func (s *Store) Late(ctx context.Context, signals []Signal, received []time.Time) ([]bool, error) {
	s.applyOverrides(signals)
	now := s.now().UnixMilli()
	at := func(i int) int64 {
		if received == nil {
			return now
		}
		return received[i].UnixMilli()
	}
	table := s.types.byIndex(s.timeout)
	shortest, longest := table[0], table[0]
	for _, d := range table {
		shortest, longest = min(shortest, d), max(longest, d)
	}
	// late[i]: signal i is late, by timeouts[i]; settled[i]: whether Redis knows its device was read
	// already, so the late mark stands.
	var late, settled []bool
	var timeouts []time.Duration
	mark := func(i int, timeout time.Duration, read bool) {
		if late == nil {
			late, settled, timeouts = make([]bool, len(signals)), make([]bool, len(signals)), make([]time.Duration, len(signals))
		}
		late[i], settled[i], timeouts[i] = true, read, timeout
	}
	var untyped []int
	// A type with expected times may be due sooner after a signal than any timeout: its typed signals
	// are judged by their own deadline (the untyped ones by its longest gap, docs/schedules.md).
	shortestTyped := shortest
	if s.anyScheduled() {
		shortestTyped = 0
	}
	for i, sig := range signals {
		age := time.Duration(at(i)-sig.Seen.UnixMilli()) * time.Millisecond
		switch {
		case age < shortest && (sig.Type == "" || age < shortestTyped):
		case sig.Type != "":
			r, err := s.resolve(ctx, sig.Type)
			if err != nil {
				return nil, err
			}
			name := r.name
			timeout := AsStored(s.timeout(name))
			if dl, scheduled := s.deadlineOf(name, sig.Seen); scheduled {
				timeout = time.Duration(dl-sig.Seen.UnixMilli()) * time.Millisecond
			}
			if age >= timeout {
				mark(i, timeout, false)
			}
		case age >= longest:
			mark(i, table.of(0), false)
		default:
			untyped = append(untyped, i)
		}
	}
	if len(untyped) > 0 {
		types, known, err := s.recordedOf(ctx, signals, untyped)
		if err != nil {
			return nil, err
		}
		for j, i := range untyped {
			timeout := table.of(types[j])
			overdue := time.Duration(at(i)-signals[i].Seen.UnixMilli())*time.Millisecond - timeout
			if overdue >= 0 && (known[j] || !s.keepsFirstWord(overdue)) {
				mark(i, timeout, true)
			}
		}
	}
	if late == nil || s.lateFirstWord <= 0 {
		return late, nil
	}
	return s.keepFirstWords(ctx, signals, late, settled, timeouts, at)
}

// keepsFirstWord reports whether a late signal overdue by this much is written when Redis does not know
// its device (Late).
func (s *Store) keepsFirstWord(overdue time.Duration) bool {
	return s.lateFirstWord > 0 && overdue <= s.lateFirstWord
}

// keepFirstWords unmarks the late signals not settled yet of devices Redis does not know whose deadline
// passed at most lateFirstWord before their receipt (Late). It returns nil when none is late any more.
func (s *Store) keepFirstWords(ctx context.Context, signals []Signal, late, settled []bool, timeouts []time.Duration,
	at func(int) int64) ([]bool, error) {
	var candidates []int
	for i := range signals {
		overdue := time.Duration(at(i)-signals[i].Seen.UnixMilli())*time.Millisecond - timeouts[i]
		if late[i] && !settled[i] && s.keepsFirstWord(overdue) {
			candidates = append(candidates, i)
		}
	}
	if len(candidates) == 0 {
		return late, nil
	}
	_, known, err := s.recordedOf(ctx, signals, candidates)
	if err != nil {
		return nil, err
	}
	for j, i := range candidates {
		if !known[j] {
			late[i] = false
		}
	}
	if slices.Contains(late, true) {
		return late, nil
	}
	return nil, nil
}

// recordedOf is recorded for the devices of signals[i] for each i of which.
func (s *Store) recordedOf(ctx context.Context, signals []Signal, which []int) (types []int, known []bool, err error) {
	devices := make([]string, len(which))
	for j, i := range which {
		devices[j] = signals[i].Device
	}
	return s.recorded(ctx, devices)
}

// recorded reads, in one round trip, the type index each device's next untyped signal would be written
// with, as the refresh script finds it: its deadline score, else its open incident's state, in its slot
// and, while a doubling settles, its old slot; 0 (default) and not known for a device Redis does not know.
func (s *Store) recorded(ctx context.Context, devices []string) (types []int, known []bool, err error) {
	l := s.Layout()
	type reads struct {
		score, oldScore *redis.FloatCmd
		state, oldState *redis.StringCmd
	}
	pipe := s.rdb.Pipeline()
	rs := make([]reads, len(devices))
	for i, dev := range devices {
		slot := Slot(dev, l.Slots)
		rs[i].score = pipe.ZScore(ctx, s.keys.Deadlines(slot), dev)
		rs[i].state = pipe.HGet(ctx, s.keys.state(slot), dev)
		if old, moved := l.oldSlot(dev); moved {
			rs[i].oldScore = pipe.ZScore(ctx, s.keys.Deadlines(old), dev)
			rs[i].oldState = pipe.HGet(ctx, s.keys.state(old), dev)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("deadline: read recorded types: %w", err)
	}
	out, known := make([]int, len(devices)), make([]bool, len(devices))
	for i, r := range rs {
		for _, c := range []struct {
			score *redis.FloatCmd
			state *redis.StringCmd
		}{{r.score, r.state}, {r.oldScore, r.oldState}} {
			if c.score == nil {
				continue
			}
			if v, err := c.score.Result(); err == nil {
				_, out[i] = scoreDeadline(v)
				known[i] = true
				break
			}
			if v, err := c.state.Result(); err == nil {
				known[i] = true
				if st, err := decodeState(v); err == nil {
					out[i] = st.TypeIndex
					break
				}
			}
		}
	}
	return out, known, nil
}
