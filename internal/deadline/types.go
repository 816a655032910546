package deadline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/typeindex"
)

// MaxTypes, DefaultType, AsStored and ErrTypesFull are the type registry's (internal/typeindex), here
// for the store's callers.
const (
	MaxTypes    = typeindex.MaxTypes
	DefaultType = typeindex.DefaultType
)

// ErrTypesFull refuses a per-device timeout when every type index is taken (typeindex.ErrTypesFull).
var ErrTypesFull = typeindex.ErrTypesFull

// AsStored is a duration as the scripts hold it: whole milliseconds, never negative.
func AsStored(d time.Duration) time.Duration { return typeindex.AsStored(d) }

// byIndex returns fn (a duration per type name) AsStored for every type index the registry knows; an
// index this replica does not know yet gets the default type's.
func byIndex(types *typeindex.Registry, fn func(string) time.Duration) typeTable {
	names := types.Names()
	t := make(typeTable, len(names))
	for i, name := range names {
		t[i] = AsStored(fn(cmpDefault(name)))
	}
	return t
}

// LongestTimeout is the longest timeout of any type name the registry holds, per-device timeouts
// included.
func (s *Store) LongestTimeout() time.Duration {
	var longest time.Duration
	for _, name := range s.types.Names() {
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
	table := byIndex(s.types, s.timeout)
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
		if old, moved := l.OldSlot(dev); moved {
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
