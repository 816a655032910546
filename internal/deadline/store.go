package deadline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/flaps"
	"github.com/heartbeatd/heartbeatd/internal/overrides"
	"github.com/heartbeatd/heartbeatd/internal/parents"
	"github.com/heartbeatd/heartbeatd/internal/redisutil"
	"github.com/heartbeatd/heartbeatd/internal/registry"
	"github.com/heartbeatd/heartbeatd/internal/replicaset"
	"github.com/heartbeatd/heartbeatd/internal/slotlayout"
	"github.com/heartbeatd/heartbeatd/internal/typeindex"
	"github.com/heartbeatd/heartbeatd/internal/typememory"
)

// Store is the deadline engine over one Redis (standalone or Cluster).
type Store struct {
	rdb     redis.UniversalClient
	keys    Keyspace
	layouts *slotlayout.Tracker // the slot layout; its data-loss detection calls dataLost
	types   *typeindex.Registry
	now     func() time.Time
	// woken fires (without blocking) when WakeChildren made alarm entries due, so this process's scanner
	// claims them at once instead of at its next idle poll.
	woken chan struct{}

	// The policy callbacks (Options), asked about configured types only: owntimeout.go applies a
	// device's own timeout.
	typeTimeout     func(typeName string) time.Duration
	typeWarnAfter   func(typeName string) time.Duration
	typeExpected    func(typeName string, seen time.Time) (time.Time, bool)
	typeRepeatEvery func(typeName string) time.Duration
	// lateFirstWord: Options.LateFirstWord.
	lateFirstWord time.Duration

	// recordPrefix and records name the in-flight records of this store's claims uniquely across
	// replicas and restarts.
	recordPrefix string
	records      atomic.Uint64

	links     *parents.Links // the parent links, beside the slots
	flaps     *flaps.Histories
	replicas  *replicaset.Set
	views     parents.Views[Parent] // the down parents read since the last verdict (parents.go)
	overrides *overrides.Table      // the per-device timeouts (register.go)

	typeMem   *typememory.Memory
	registry  *registry.Registry // its entries; Register writes them with the deadline
	typesOwed atomic.Bool        // the type registry has not been written back since the last data loss (datalost.go)
}

// Options configures a Store.
type Options struct {
	KeyPrefix string           // redis.key_prefix
	Slots     int              // redis.slots, a power of two
	Now       func() time.Time // injected clock; time.Now when nil
	// Timeout returns the silence timeout of a device type (its policy lives outside this package). It is
	// asked on every refresh, so a reloaded policy applies from each device's next signal. Required.
	Timeout func(typeName string) time.Duration
	// RepeatEvery returns the repeat interval of a device type (≤ 0: none). A claim commits each plain
	// fresh incident with its next act one interval away (doc.go); nil commits them without repeats, and
	// the alarm loop then acknowledges every claim of a type that has repeats itself.
	RepeatEvery func(typeName string) time.Duration
	// LateFirstWord is how long past its deadline a late signal of a device Redis does not know may be
	// and still be written (detection.max_hold_back; 0: never, see Late).
	LateFirstWord time.Duration
	// Expected returns the deadline a signal at seen sets for a type with expected times (a schedule,
	// docs/schedules.md) and true, or false for a type timed by Timeout. It is asked per signal: make
	// its answer for a fleet without schedules cheap. nil: no type has expected times.
	Expected func(typeName string, seen time.Time) (time.Time, bool)
	// WarnAfter returns a type's warn_after (0: none, shorter than its timeout otherwise): a signal of
	// such a type sets its score to seen + warn_after, whose claim reports the device late (warn.go). It
	// is asked per signal: make its answer for a fleet without warnings cheap. nil: no type warns.
	WarnAfter func(typeName string) time.Duration
}

// New returns a Store on rdb. It checks nothing on Redis: call Ping to know Redis answers.
func New(rdb redis.UniversalClient, opts Options) (*Store, error) {
	if opts.Slots <= 0 || opts.Slots&(opts.Slots-1) != 0 {
		return nil, fmt.Errorf("deadline: slots %d is not a power of two", opts.Slots)
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	if opts.Timeout == nil {
		return nil, fmt.Errorf("deadline: Options.Timeout is required")
	}
	keys := NewKeyspace(opts.KeyPrefix)
	repeatEvery := opts.RepeatEvery
	if repeatEvery == nil {
		repeatEvery = func(string) time.Duration { return 0 }
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("deadline: record names: %w", err)
	}
	warnAfter := opts.WarnAfter
	if warnAfter == nil {
		warnAfter = func(string) time.Duration { return 0 }
	}
	s := &Store{rdb: rdb, keys: keys, types: typeindex.New(rdb, keys.Types()), now: now, woken: make(chan struct{}, 1), typeTimeout: opts.Timeout,
		typeWarnAfter: warnAfter, typeExpected: opts.Expected, typeRepeatEvery: repeatEvery, lateFirstWord: opts.LateFirstWord, recordPrefix: recordMark + hex.EncodeToString(id[:]) + ":",
		typeMem: typememory.New(rdb, opts.KeyPrefix), registry: registry.New(rdb, opts.KeyPrefix), links: parents.New(rdb, opts.KeyPrefix, now), flaps: flaps.New(rdb, opts.KeyPrefix), replicas: replicaset.New(rdb, opts.KeyPrefix), overrides: overrides.New(rdb, opts.KeyPrefix)}
	s.layouts = slotlayout.New(rdb, opts.KeyPrefix, opts.Slots, now, s.dataLost)
	return s, nil
}

// recordMark starts the name of every in-flight record: a control character, so a record never collides
// with a device in the alarms set (docs/signals.md), and the claim script tells the two apart by it.
const recordMark = "\x00claims:"

// newRecord names the in-flight record of one claim, unique to this store.
func (s *Store) newRecord() string {
	return s.recordPrefix + strconv.FormatUint(s.records.Add(1), 36)
}

// Links returns the parent links this store writes with its signals, registrations and deletes: the
// parents are read there (Links.ParentsOf), and the sweeper settles and repairs them (Links.PayUnlinks,
// Links.RepairNamedParents).
func (s *Store) Links() *parents.Links { return s.links }

// Flaps returns the devices' interruption histories, which go with a device this store deletes: the
// alarm loop reads and records them, the sweeper prunes them.
func (s *Store) Flaps() *flaps.Histories { return s.flaps }

// Replicas returns the replica set and the slot leases on this store's Redis, for slot ownership
// (internal/scan).
func (s *Store) Replicas() *replicaset.Set { return s.replicas }

// Registry returns the device registry's entries this store writes with its registrations: the labels
// are read there (Registry.Labels), and the daemon moves the old layout (Registry.Migrate).
func (s *Store) Registry() *registry.Registry { return s.registry }

// Keys returns the store's key builder, for the packages that keep their own keys beside the slots.
func (s *Store) Keys() Keyspace { return s.keys }

// Slots returns the number of slots now.
func (s *Store) Slots() int { return s.layouts.Load().Slots }

// Layout returns the slot layout in force.
func (s *Store) Layout() Layout { return *s.layouts.Load() }

// Now is the store's clock (Options.Now), the one its stored times are on.
func (s *Store) Now() time.Time { return s.now() }

// Woken fires (without blocking) when WakeChildren made alarm entries due, so this process's scanner
// claims them at once instead of at its next idle poll.
func (s *Store) Woken() <-chan struct{} { return s.woken }

// Ping reports whether Redis answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("deadline: redis: %w", err)
	}
	return nil
}

// TypeOf resolves a type index found in a score or state to the configured type and, for a device
// registered with its own timeout, that timeout (0: its type's).
func (s *Store) TypeOf(ctx context.Context, idx int) (typ string, own time.Duration) {
	return s.typeOf(ctx, idx)
}

// typeIndex returns name's index: the default type's for a name Load was not given.
func (s *Store) typeIndex(ctx context.Context, name string) (int, error) {
	r, err := s.resolve(ctx, name)
	return r.idx, err
}

// Signal moves one device's deadline to Seen + the timeout of its type (+ its warn_after when it has one).
type Signal struct {
	Device string
	Type   string // "" keeps the type last recorded for the device (default when none)
	// Parent is the device's gateway or cell ("" = none named: the link last recorded stays).
	Parent string
	Seen   time.Time
}

// refreshScript moves the deadlines of devices forward in one call and probes for recovery.
//
// KEYS: quads deadlines, alarms, state, seen — one per slot in the call (one slot on Redis Cluster, every
// slot of the batch on a standalone server, where one call per batch saves a call per slot)
// ARGV[1] now (ms)
// ARGV[2] timeout (ms) per type index, comma-separated ("" when every signal names its type); -k for a
// type with expected times: its deadline is the k-th value after the signal's -1 (below)
// ARGV[3] the type index each type index is written with now, comma-separated ("" when each is its own)
// ARGV[4] the lead (ms) each type index was written with, comma-separated (with ARGV[3] only)
// then quads: key quad number (1-based), device, ms, type index. With a type index ms is the deadline;
// with -1 ms is the signal time and the deadline is ms + the timeout of the type recorded for the device
// (default when none). While some type has expected times, the -1 is followed, comma-separated, by the
// deadline the signal sets for each such type, and the signal time of such a device is kept in seen.
// Reply: the number of devices whose alarm entry was made due now (recovery candidates).
//
// One ZADD GT per slot carries every member, so deadlines only move forward: out-of-order and replayed
// signals are harmless. A recorded type whose timeout changed since is written under its new index, when
// the signal supersedes the stored one (retime.go). The type is recorded in the score (see
// MaxTypes), so an untyped signal costs one ZSCORE here instead of a round trip from Go. Interrupted devices
// are in the alarms set; making their entry due now (probeDue) lets the scanner emit ` + "`recovered`" + `
// within one wake-up without a per-device lookup here.
var refreshScript = newScript(`
${luaPieces}
${luaProbe}
${luaRetime}
local zargs, pargs = {}, {}
local now = ARGV[1]
local timeouts, currents, leads
for i = 5, #ARGV, 4 do
  local k, m, dl, t = tonumber(ARGV[i]), ARGV[i+1], tonumber(ARGV[i+2]), tonumber(ARGV[i+3])
  local base = (k - 1) * 4
  local expected, cur, seen, nt
  if not t then t, expected = -1, ARGV[i+3] end
  if t < 0 then
    t, seen = 0, dl
    cur = redis.call('ZSCORE', KEYS[base+1], m)
    if cur then
      cur = tonumber(cur)
      t = cur % ${MaxTypes}
    else
      local st = redis.call('HGET', KEYS[base+3], m)
      -- A full state holds the type second; a claim's bare deadline score holds it in its low bits.
      if st then t = tonumber(string.match(st, ${stateTypePattern}) or (tonumber(st) % ${MaxTypes})) or 0 end
    end
    if not timeouts then
      timeouts, currents, leads = numbers(ARGV[2]), numbers(ARGV[3]), numbers(ARGV[4])
    end
    local v = timeouts[t+1] or timeouts[1]
    if v >= 0 then
      dl, nt = dl + v, currents[t+1]
    elseif expected then
      redis.call('ZADD', KEYS[base+4], 'GT', dl, m)
      local j = 0
      for x in string.gmatch(expected, ${listItem}) do
        if j == -v then dl = tonumber(x) end
        j = j + 1
      end
    end
  end
  local z, p = zargs[k], pargs[k]
  if not z then
    z, p = {}, {}
    zargs[k], pargs[k] = z, p
  end
  nt = nt or t
  local score = dl * ${MaxTypes} + nt
  local write = nt == t or supersedes(cur, score, seen, tonumber(now), leads)
  if nt == t then
    z[#z+1] = string.format('%.0f', score)
    z[#z+1] = m
  elseif write then
    redis.call('ZADD', KEYS[base+1], string.format('%.0f', score), m)
  end
  if write then p[#p+1] = m end
end
local probed = 0
for k, z in pairs(zargs) do
  local base = (k - 1) * 4
  pieces(z, 2, function(...) redis.call('ZADD', KEYS[base+1], 'GT', ...) end)
  probed = probed + probeDue(KEYS[base+2], tonumber(now), pargs[k])
end
return probed
`)

// Refresh moves the deadlines of a batch of signals forward, in one round trip in the steady state, and
// returns only after Redis acknowledged every write, so callers may then acknowledge the signals' source
// messages. A device appearing twice keeps its latest deadline. After an error, send the same batch
// again with RefreshRetry, not Refresh.
//
// Signals that name their type are written with plain pipelined commands, one ZADD GT per slot into the
// deadlines, because the Lua interpreter costs more than the writes themselves. The recovery probe
// (probeScript) is needed only for a device that was not in the deadlines set — an
// interrupted device, which its claim took out of it — so it is sent, in a second round trip, only for
// the slots whose ZADD reports an added member (a recovering or a new device). A device already in the
// deadlines set cannot be waiting for its recovery to be noticed: its alarm entry, if any, was made due
// when the signal that put it back arrived, or is caught by the claim's acknowledgement, which compares
// with the deadlines set. Skipping the probe halves the commands Redis runs per batch. The one gap is a
// probe that never ran after its ZADD did: a failed second round trip is closed by RefreshRetry, a crash
// between the two by the dormant sweep (dormant.go). Untyped signals need the type recorded in Redis to
// compute their deadline and go through refreshScript: one call per batch on a standalone server, one per
// slot on Redis Cluster (a script's keys must share a hash slot there); it always probes.
func (s *Store) Refresh(ctx context.Context, signals []Signal) error {
	return s.refresh(ctx, signals, false)
}

// RefreshRetry is Refresh for a batch whose earlier Refresh failed: part of it may be stored already,
// so its ZADD may add nothing where the lost round trip had added a member, and a probe that depended on
// that would never run. It probes every slot it writes, in the first round trip.
func (s *Store) RefreshRetry(ctx context.Context, signals []Signal) error {
	return s.refresh(ctx, signals, true)
}

// refresh is Refresh; probeAll probes every slot written instead of only those whose ZADD added a member.
func (s *Store) refresh(ctx context.Context, signals []Signal, probeAll bool) error {
	if len(signals) == 0 {
		return nil
	}
	s.applyOverrides(signals)
	now := s.now().UnixMilli()
	layout := s.layouts.Load()
	var moved movedSignals
	if layout.Moving() {
		var err error
		if moved, err = s.resolveMoved(ctx, layout, signals); err != nil {
			return err
		}
	}
	if err := s.typeMem.ApplyRetyped(ctx); err != nil {
		return err
	}
	recorded, err := s.recordedTypes(ctx, layout, signals, moved, now/1000)
	if err != nil {
		return err
	}
	plan := refreshPlan{typed: map[int]*typedSlot{}, oldEntries: map[int][]any{}}
	for i, sig := range signals {
		if err := s.planSignal(ctx, &plan, layout, sig, moved, &recorded, i); err != nil {
			return err
		}
	}
	added, err := s.writeRefresh(ctx, &plan, signals, now, probeAll)
	if err != nil {
		return err
	}
	if s.typeMem.Seen() == recorded.logSeen {
		// Not when the log moved meanwhile: a read may predate a change the log already made forgotten.
		s.typeMem.Remember(recorded.learned, now/1000)
	}
	var probes []scriptCall
	for slot, cmd := range added {
		if ts := plan.typed[slot]; cmd.Val() > 0 && !ts.probeNow {
			probes = append(probes, s.probeCall(slot, now, ts.deadlines, ts.incidents))
		}
	}
	if len(probes) > 0 {
		if _, err := s.runAll(ctx, probeScript, probes); err != nil {
			return fmt.Errorf("deadline: refresh: recovery probe: %w", err)
		}
	}
	return nil
}

// probeScript is the recovery probe of one slot (probeDue).
//
// KEYS[1] alarms  ARGV[1] now (ms), then the devices
// Reply: how many alarm entries it made due.
var probeScript = newScript(`
${luaPieces}
${luaProbe}
local devices = {}
for i = 2, #ARGV do devices[i-1] = ARGV[i] end
return probeDue(KEYS[1], tonumber(ARGV[1]), devices)
`)

// probeCall makes the alarm entries, in slot, of the devices just written to its deadlines and of the
// moved devices whose incident lives there due now, unless a claim holds them (probeDue), so the scanner
// reports their recovery within one wake-up. The list is built here, not per signal: most batches send
// no probe at all.
func (s *Store) probeCall(slot int, now int64, deadlines []redis.Z, incidents []any) scriptCall {
	args := make([]any, 0, 1+len(deadlines)+len(incidents))
	args = append(args, now)
	for _, z := range deadlines {
		args = append(args, z.Member)
	}
	args = append(args, incidents...)
	return scriptCall{Keys: []string{s.keys.alarms(slot)}, Args: args}
}

// recorded is what a batch knows of its devices' recorded types.
type recorded struct {
	// types holds, by index in the batch, the recorded type index shifted left by two over its source.
	types   []int32
	learned []typememory.Learned // to remember once the batch is written
	logSeen int64                // the retyped count the memory had applied when the batch looked
}

// Where a batch learned a device's recorded type.
const (
	typeUnknown    = iota // neither remembered nor in the deadlines set
	typeRemembered        // from the store's memory
	typeRead              // from the deadlines set's score
)

func (r recorded) of(i int) (index, source int) { return int(r.types[i] >> 2), int(r.types[i] & 3) }

func (r recorded) set(i, index, source int) { r.types[i] = int32(index)<<2 | int32(source) }

// recordedTypes finds the type recorded for the devices of the signals that need it: untyped signals, to
// time their deadline, and typed ones whose device this store does not remember, to learn whether the
// signal changes its type (the other replicas must then hear of it, internal/typememory). It answers from the
// store's memory where it can and reads the rest with one ZMSCORE per slot. Plain reads and writes beat
// the script, whose interpreter costs more than the commands it runs; devices not in the deadlines set
// (new, or interrupted with their type in the incident) are left to the script when untyped.
func (s *Store) recordedTypes(ctx context.Context, l *Layout, signals []Signal, moved movedSignals, now int64) (recorded, error) {
	rec := recorded{types: make([]int32, len(signals)), logSeen: s.typeMem.Seen()}
	s.typeMem.Lookup(func(yield func(int, string) bool) {
		for i, sig := range signals {
			if _, isMoved := moved[i]; !isMoved && !yield(i, sig.Device) {
				return
			}
		}
	}, now, func(i, index int) { rec.set(i, index, typeRemembered) })
	bySlot := map[int][]int{}
	for i, sig := range signals {
		if _, isMoved := moved[i]; isMoved {
			continue
		}
		if _, source := rec.of(i); source == typeUnknown {
			slot := Slot(sig.Device, l.Slots)
			bySlot[slot] = append(bySlot[slot], i)
		}
	}
	if len(bySlot) == 0 {
		return rec, nil
	}
	err := s.deadlineScores(ctx, bySlot, func(i int) string { return signals[i].Device }, func(i int, score float64) {
		_, t := scoreDeadline(score)
		rec.set(i, t, typeRead)
	})
	if err != nil {
		return rec, fmt.Errorf("deadline: refresh: read recorded types: %w", err)
	}
	return rec, nil
}

// untypedCalls groups untyped signals into refreshScript calls.
func (s *Store) untypedCalls(ctx context.Context, signals []Signal, now int64) ([]scriptCall, error) {
	if len(signals) == 0 {
		return nil, nil
	}
	table, expectedNames := s.untypedTable()
	timeouts := table.render(millis)
	currents, leads, err := s.untypedTables(ctx)
	if err != nil {
		return nil, err
	}
	slots := s.Slots()
	calls := s.newSlotCalls(func(slot int) []string {
		return []string{s.keys.Deadlines(slot), s.keys.alarms(slot), s.keys.state(slot), s.keys.seen(slot)}
	}, now, timeouts, currents, leads)
	for _, sig := range signals {
		calls.add(Slot(sig.Device, slots), sig.Device, sig.Seen.UnixMilli(), s.untypedType(expectedNames, sig.Seen))
	}
	return calls.calls, nil
}

// scriptCall is one call of a script run by runAll or runScripts (internal/redisutil).
type scriptCall = redisutil.ScriptCall

func (s *Store) runAll(ctx context.Context, script *redis.Script, calls []scriptCall) ([]*redis.Cmd, error) {
	return redisutil.RunAll(ctx, s.rdb, script, calls)
}

func (s *Store) runScripts(ctx context.Context, scripts []*redis.Script, calls []scriptCall, family []*redis.Script) ([]*redis.Cmd, error) {
	return redisutil.RunScripts(ctx, s.rdb, scripts, calls, family)
}

// Load reads the type registry so that the types other replicas registered resolve from the start, and
// registers names (the configured types) so they have indexes before the first signal needs them; from
// then on only these names are recorded (typeindex.Registry.Configure). It refuses more names than
// MaxTypes: their devices could not be told apart in a deadline score.
func (s *Store) Load(ctx context.Context, names ...string) error {
	if p := typeindex.CountProblem(len(names)); p != "" {
		return fmt.Errorf("deadline: %s", p)
	}
	if err := s.types.Reload(ctx); err != nil {
		return err
	}
	s.types.Configure(names)
	for _, n := range append([]string{DefaultType}, names...) {
		if _, err := s.typeIndex(ctx, n); err != nil {
			return err
		}
	}
	return nil
}
