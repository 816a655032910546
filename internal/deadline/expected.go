package deadline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// deadlineOf is the deadline (ms) a signal at seen sets for a device of type name: the type's expected
// time + grace when it has a schedule (expected), else seen + its lead (warn_after, else timeout).
func (s *Store) deadlineOf(name string, seen time.Time) (ms int64, expected bool) {
	return s.deadlineAt(name, s.lead(name), seen)
}

// anyScheduled reports whether some known type has expected times.
func (s *Store) anyScheduled() bool {
	if s.typeExpected == nil {
		return false
	}
	now := s.now()
	for _, name := range s.types.Names() {
		if _, ok := s.expected(cmp.Or(name, DefaultType), now); ok {
			return true
		}
	}
	return false
}

// untypedTable is the refresh script's timeout table: a type with expected times gets -k, pointing at the
// k-th deadline each untyped signal carries (refreshScript); expectedNames are those types, in order.
func (s *Store) untypedTable() (typeTable, []string) {
	table := byIndex(s.types, s.lead)
	if s.typeExpected == nil {
		return table, nil
	}
	var names []string
	probe := s.now()
	for i, name := range s.types.Names() {
		if name == "" {
			name = DefaultType
		}
		if _, ok := s.expected(name, probe); ok {
			names = append(names, name)
			table[i] = -time.Duration(len(names)) * time.Millisecond
		}
	}
	return table, names
}

// untypedType is an untyped signal's type argument: -1, followed while some type has expected times by
// the deadline the signal sets for each of them.
func (s *Store) untypedType(expectedNames []string, seen time.Time) string {
	if len(expectedNames) == 0 {
		return "-1"
	}
	var b strings.Builder
	b.WriteString("-1")
	for _, name := range expectedNames {
		dl, _ := s.deadlineOf(name, seen)
		b.WriteString(listSep)
		b.WriteString(strconv.FormatInt(dl, 10))
	}
	return b.String()
}

// seenWrites are a batch's signal times of devices with expected times, by slot.
type seenWrites map[int][]redis.Z

func (w *seenWrites) add(slot int, sig Signal) {
	if *w == nil {
		*w = seenWrites{}
	}
	(*w)[slot] = append((*w)[slot], redis.Z{Score: float64(sig.Seen.UnixMilli()), Member: sig.Device})
}

// queue adds the writes to pipe: GT, so a replayed or out-of-order signal never moves last_seen back.
func (w seenWrites) queue(ctx context.Context, pipe redis.Pipeliner, keys Keyspace) {
	for slot, zs := range w {
		pipe.ZAddArgs(ctx, keys.seen(slot), redis.ZAddArgs{GT: true, Members: zs})
	}
}

// incidentSeenMark starts the seen-set member that pins a device's last signal before its open incident:
// a control character, so it never collides with a device id (docs/signals.md).
const incidentSeenMark = "\x01"

// SeenTimes are the recorded signal times of a device with expected times; zero where none is recorded.
type SeenTimes struct {
	Latest time.Time // its last signal
	Pinned time.Time // its last signal before its open incident, pinned when the incident was claimed
}

// SeenOf reads the signal times of the claims' devices for which want is true, one round trip; the
// others get zero.
func (s *Store) SeenOf(ctx context.Context, claims []Claim, want []bool) ([]SeenTimes, error) {
	out := make([]SeenTimes, len(claims))
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.FloatSliceCmd, len(claims))
	for i, c := range claims {
		if want[i] {
			cmds[i] = pipe.ZMScore(ctx, s.keys.seen(c.Slot), c.Device, incidentSeenMark+c.Device)
		}
	}
	if pipe.Len() == 0 {
		return out, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("deadline: read signal times: %w", err)
	}
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		if v := cmd.Val(); len(v) == 2 {
			out[i] = SeenTimes{Latest: msTime(v[0]), Pinned: msTime(v[1])}
		}
	}
	return out, nil
}

func msTime(ms float64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(int64(ms))
}

// SeenPin pins (At set) or unpins (At zero: the incident ended) a device's last signal before its
// incident.
type SeenPin struct {
	Device string
	Slot   int
	At     time.Time
}

// PinSeen applies pins in one round trip.
func (s *Store) PinSeen(ctx context.Context, pins []SeenPin) error {
	if len(pins) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	for _, p := range pins {
		if p.At.IsZero() {
			pipe.ZRem(ctx, s.keys.seen(p.Slot), incidentSeenMark+p.Device)
		} else {
			pipe.ZAdd(ctx, s.keys.seen(p.Slot), redis.Z{Score: float64(p.At.UnixMilli()), Member: incidentSeenMark + p.Device})
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("deadline: pin signal times: %w", err)
	}
	return nil
}

// fillLastSignals reads the recorded last signal of the devices whose type has expected times, in one
// round trip, each in slotOf(its index); nothing for a fleet without them.
func (s *Store) fillLastSignals(ctx context.Context, devices []Device, slotOf func(i int) int) error {
	if s.typeExpected == nil {
		return nil
	}
	now := s.now()
	var claims []Claim
	var which []int
	for i, d := range devices {
		if _, ok := s.expected(d.recordedType(), now); ok {
			claims = append(claims, Claim{Device: d.ID, Slot: slotOf(i)})
			which = append(which, i)
		}
	}
	if len(claims) == 0 {
		return nil
	}
	want := make([]bool, len(claims))
	for i := range want {
		want[i] = true
	}
	seen, err := s.SeenOf(ctx, claims, want)
	if err != nil {
		return err
	}
	for j, i := range which {
		devices[i].LastSignal = seen[j].Latest
		if devices[i].Incident != nil && !seen[j].Pinned.IsZero() {
			devices[i].LastSignal = seen[j].Pinned
		}
	}
	return nil
}
