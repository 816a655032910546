// Package typeindex is the registry of type names behind the type index folded into every deadline
// score (internal/deadline: score = deadline_ms × MaxTypes + type index). It maps each registry name (a
// recorded type name and the lead its scores are written with, names.go) to its index, shared by every
// replica through one Redis hash and cached in each, and frees the indexes no score uses any more
// (reclaim.go). The hash's key is internal/deadline's (Keyspace.Types), given to New; deadline asks the
// registry for indexes and names, and nothing else writes the hash.
package typeindex

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/redisutil"
)

// scriptConstants fills in the constants the registry's scripts share with Go (redisutil.NewScript).
var scriptConstants = strings.NewReplacer(
	"${MaxTypes}", strconv.Itoa(MaxTypes),
	"${DefaultType}", redisutil.LuaString(DefaultType),
	"${typeFieldMarkByte}", strconv.Itoa(int(typeFieldMark[0])),
	"${typeRetiredField}", redisutil.LuaString(typeRetiredField),
	"${typeVersionField}", redisutil.LuaString(typeVersionField),
	"${typeReclaimField}", redisutil.LuaString(typeReclaimField),
)

func newScript(src string) *redis.Script { return redisutil.NewScript(scriptConstants, src) }

// MaxTypes is how many type names fit in the 10 bits folded into each deadline score
// (score = deadline_ms × MaxTypes + type index; exact in a float64 until the year 2248). Folding the type
// into the score keeps a refresh a single ZADD and costs no memory per device, where a hash field per
// device would (docs/benchmarks.md). The scripts read it from here (scripts.go).
const MaxTypes = 1024

// DefaultType always has index 0, so a device whose type was never recorded resolves to it.
const DefaultType = "default"

// registerTypeScript gives name the index after the highest one taken, or returns the one it has. Not
// the count of names: a registry restored after a loss (Registry.restore) may have gaps. Past the
// last index it takes the lowest one neither a name nor a retired mark holds: one a reclaim released
// (reclaim.go).
//
// KEYS[1] type registry hash
// ARGV[1] type name  ARGV[2] the name an older version registered it under ("" when none may stand for
// it): its index, when it has one (names.go, legacyLead)
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

// Registry maps type names to the small indexes stored in scores, shared by every replica through
// one Redis hash and cached here. A registry name is a recorded name and the lead its scores are written
// with (names.go); it never changes index while registered. Only configured names (the last Configure)
// and the per-device timeout names are registered: device type names are not trusted to grow Redis or
// this cache, so any other name resolves to the default type's.
type Registry struct {
	rdb redis.UniversalClient
	key string

	mu         sync.RWMutex
	byName     map[string]int          // every registry name the registry holds (at most MaxTypes)
	byIdx      map[int]string          // the same, by index
	currentOf  map[string]CurrentIndex // recorded name → the index it is written with now
	configured map[string]bool         // the names of the last Configure; nil before it (then every name is unknown)
	// perDevice are the per-device timeout names ("<type>@<timeout>", OwnTypeName) the operator
	// registered; they survive a Configure.
	perDevice map[string]bool
	// version is the registry's version (typeVersionField) the cache was rebuilt at.
	version atomic.Int64
	// byRecorded is, by type index, what a signal of the type recorded there resolves to (its recorded
	// name's current index), so an untyped signal costs one lookup; nil or zero entries: not yet asked.
	// Cleared whenever the names that resolve change (a Configure, a per-device name, a rebuild).
	byRecorded []Resolved
}

// New is the registry kept in the hash at key (internal/deadline's Keyspace.Types) on rdb.
func New(rdb redis.UniversalClient, key string) *Registry {
	return &Registry{rdb: rdb, key: key, byName: map[string]int{DefaultType: 0}, byIdx: map[int]string{0: DefaultType},
		currentOf: map[string]CurrentIndex{}}
}

// Configure sets the configured names: from now on only they resolve to their own index (the store's Load).
func (r *Registry) Configure(names []string) {
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

// Allow lets a per-device timeout name resolve to its own index under lead, registering it in Redis;
// ErrTypesFull when no index is left for it.
func (r *Registry) Allow(ctx context.Context, name string, lead time.Duration) (int, error) {
	i, full, err := r.Current(ctx, name, lead)
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

// Cached is name's current index as last resolved (cached), and whether name is known: one lock for
// both, on the signal path.
func (r *Registry) Cached(name string) (c CurrentIndex, known, cached bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	c, cached = r.currentOf[name]
	return c, name != "" && (r.configured[name] || r.perDevice[name]), cached
}

// Current returns the index recorded name is written with under lead, registering its registry name
// when the lead is new. A full registry gives the default type's index (full): a configured type's
// devices keep being watched, under the default policy; a per-device timeout is refused (allow).
func (r *Registry) Current(ctx context.Context, name string, lead time.Duration) (idx int, full bool, err error) {
	r.mu.RLock()
	c, ok := r.currentOf[name]
	r.mu.RUnlock()
	if ok && c.Lead == lead {
		return c.Idx, c.Full, nil
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
			idx = d.Idx
		}
	}
	r.mu.Lock()
	r.currentOf[name] = CurrentIndex{Lead: lead, Idx: idx, Full: full}
	r.mu.Unlock()
	return idx, full, nil
}

// register gives registry name an index in Redis (or reads the one it has, or alias's: the name an
// older version registered it under, "" for none) and caches it; full is true (index 0) when none is
// left.
func (r *Registry) register(ctx context.Context, name, alias string) (idx int, full bool, err error) {
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

// Name returns the recorded name of idx (its registry name without the lead), reloading the registry
// when another replica registered it.
func (r *Registry) Name(ctx context.Context, idx int) string {
	n, _ := r.LookupName(ctx, idx)
	return n
}

// LookupName is Name with Lookup's error.
func (r *Registry) LookupName(ctx context.Context, idx int) (string, error) {
	full, err := r.Lookup(ctx, idx)
	if i := strings.LastIndexByte(full, timedSep[0]); i >= 0 { // what splitTimed cuts, without parsing the lead
		return full[:i], err
	}
	return full, err
}

// FullName is idx's registry name; the default type's for an index nobody registered, or when the
// registry cannot be read.
func (r *Registry) FullName(ctx context.Context, idx int) string {
	n, _ := r.Lookup(ctx, idx)
	return n
}

// Lookup is FullName that tells a registry it could not read from an index nobody registered: with an
// error it still returns the default type's name, which a caller that acts on the type must not use
// (a claim of a type with warn_after timed as the default's would skip its `late`).
func (r *Registry) Lookup(ctx context.Context, idx int) (string, error) {
	r.mu.RLock()
	n, ok := r.byIdx[idx]
	r.mu.RUnlock()
	if ok {
		return n, nil
	}
	if err := r.Reload(ctx); err != nil {
		return DefaultType, err
	}
	r.mu.RLock()
	n, ok = r.byIdx[idx]
	r.mu.RUnlock()
	if ok {
		return n, nil
	}
	return DefaultType, nil
}

// Restore writes back every name this registry knows under its index: Redis lost the registry, and
// the scores written since still carry these indexes.
func (r *Registry) Restore(ctx context.Context) error {
	r.mu.RLock()
	pairs := make([]any, 0, 2*len(r.byIdx))
	for i, name := range r.byIdx {
		pairs = append(pairs, name, i)
	}
	r.mu.RUnlock()
	if _, err := redisutil.SetMissing(ctx, r.rdb, r.key, pairs); err != nil {
		return fmt.Errorf("deadline: restore type registry: %w", err)
	}
	return nil
}

// Reload adds the names other replicas registered to the cache.
func (r *Registry) Reload(ctx context.Context) error {
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
func (r *Registry) rebuild(ctx context.Context, version int64) error {
	all, err := r.rdb.HGetAll(ctx, r.key).Result()
	if err != nil {
		return fmt.Errorf("deadline: load type registry: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byName, r.byIdx, r.currentOf = map[string]int{DefaultType: 0}, map[int]string{0: DefaultType}, map[string]CurrentIndex{}
	r.byRecorded = nil
	r.addLocked(all)
	r.version.Store(version)
	return nil
}

func (r *Registry) addLocked(all map[string]string) {
	for name, v := range all {
		i, err := strconv.Atoi(v)
		if err != nil || strings.HasPrefix(name, typeFieldMark) || i < 0 || i >= MaxTypes {
			continue
		}
		r.byName[name] = i
		r.byIdx[i] = name
	}
}

// Count is how many names the registry holds, as far as this replica knows.
func (r *Registry) Count() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.byName)
}

// ConfiguredNames are the names of the last Configure.
func (r *Registry) ConfiguredNames() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.configured))
	for name := range r.configured {
		out = append(out, name)
	}
	return out
}

// CountProblem says why n configured types are too many, to follow a key in an error: more than MaxTypes
// could not be told apart in a deadline score; "" when n fit. internal/config checks a configuration with
// it (without Redis), and the store's Load refuses such a list with it.
func CountProblem(n int) string {
	if n > MaxTypes {
		return fmt.Sprintf("%d types: at most %d fit in a deadline score", n, MaxTypes)
	}
	return ""
}

// AsStored is a duration as the scripts hold it: whole milliseconds, never negative.
func AsStored(d time.Duration) time.Duration { return max(d, 0).Truncate(time.Millisecond) }

// MayHold reports whether a device can be listed under base type name: the registry holds the name, or
// a per-device timeout name of it. Devices of names it never held are recorded under the default type.
func (r *Registry) MayHold(name string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for full := range r.byName {
		if n, _, _ := splitTimed(full); n == name || strings.HasPrefix(n, name+ownTypeSep) {
			return true
		}
	}
	return false
}

// Names returns every known recorded name at its index, "" at an index this replica does not know.
func (r *Registry) Names() []string {
	out := r.FullNames()
	for i, full := range out {
		out[i], _, _ = splitTimed(full)
	}
	return out
}

// FullNames returns every known registry name at its index, "" at an index this replica does not know.
func (r *Registry) FullNames() []string {
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

// CurrentIndex is the index a recorded name is written with under the lead it had when last asked.
type CurrentIndex struct {
	Lead time.Duration
	Idx  int
	Full bool // no index was left for it: Idx is a fallback (Registry.Current)
}

// Resolved is the type index a signal of name is written with now, the name that index stands for (the
// default type for a name that is not configured) and its lead.
type Resolved struct {
	Idx  int
	Name string
	Lead time.Duration
}

// ResolvedAt is what the type recorded at idx resolved to when last asked (ok false: not yet).
func (r *Registry) ResolvedAt(idx int) (res Resolved, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if idx < 0 || idx >= len(r.byRecorded) {
		return Resolved{}, false
	}
	res = r.byRecorded[idx]
	return res, res.Name != ""
}

func (r *Registry) SetResolvedAt(idx int, res Resolved) {
	if idx < 0 || idx >= MaxTypes {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byRecorded == nil {
		r.byRecorded = make([]Resolved, MaxTypes)
	}
	r.byRecorded[idx] = res
}
