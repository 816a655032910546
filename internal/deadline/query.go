package deadline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/loop"
)

// Device is what Redis knows of one device.
type Device struct {
	ID   string
	Type string // its configured type
	// OwnTimeout is its own timeout when it was registered with one (0: its type's).
	OwnTimeout time.Duration
	// Deadline is the current deadline while the device is in the deadlines set (online, or signalled
	// again while its recovery is being reported).
	Deadline time.Time
	// Incident is the open interruption, nil when there is none.
	Incident *State
	// NextAct is when the alarm loop acts on the incident next; zero when dormant (acked, exhausted).
	NextAct time.Time
	Parked  bool
	// Parent is the device's gateway or cell as last named ("" when none).
	Parent string
	// LastSignal is the recorded last signal of a device whose type has expected times (its last before
	// the open incident, if any), or the last signal behind a deadline written under another timeout
	// than its type's now (internal/typeindex, names.go); zero for the others, whose last signal is
	// deadline − timeout.
	LastSignal time.Time
	// Cause is why the open incident began when it was not silence (a reported failure, offline); nil
	// for silence. Without an incident (Device only, not List): the cause of the moved deadline the device
	// is due at, a failure or an offline message not claimed yet.
	Cause *Cause
}

// Online reports whether the device has no open incident and a deadline.
func (d Device) Online() bool { return d.Incident == nil && !d.Deadline.IsZero() }

// LastSeen is the device's last signal as its events tell it: the cause's when a reported failure or an
// offline message moved its deadline (docs/signals.md), else LastSignal. Zero: the deadline − its
// timeout, which only the caller's policy can tell.
func (d Device) LastSeen() time.Time {
	if d.Cause != nil && !d.Cause.LastSeen.IsZero() {
		return d.Cause.LastSeen
	}
	return d.LastSignal
}

func scoreDeadline(score float64) (time.Time, int) {
	dl := math.Floor(score / MaxTypes)
	return time.UnixMilli(int64(dl)), int(score - dl*MaxTypes)
}

// Device returns what Redis knows of id; found is false when it knows nothing. While a doubling settles,
// an incident still kept in the device's old slot is found there.
func (s *Store) Device(ctx context.Context, id string) (d Device, found bool, err error) {
	l := s.Layout()
	d, found, err = s.deviceIn(ctx, id, Slot(id, l.Slots))
	if old, moved := l.OldSlot(id); err == nil && moved && d.Incident == nil {
		od, ofound, oerr := s.deviceIn(ctx, id, old)
		if oerr != nil {
			return d, found, oerr
		}
		if ofound && (od.Incident != nil || !found) {
			if found && d.Deadline.After(od.Deadline) {
				od.Deadline = d.Deadline
			}
			return od, true, nil
		}
	}
	return d, found, err
}

func (s *Store) deviceIn(ctx context.Context, id string, slot int) (d Device, found bool, err error) {
	pipe := s.rdb.Pipeline()
	score := pipe.ZScore(ctx, s.keys.Deadlines(slot), id)
	act := pipe.ZScore(ctx, s.keys.alarms(slot), id)
	state := pipe.HGet(ctx, s.keys.state(slot), id)
	dead := pipe.ZScore(ctx, s.keys.dead(slot), id)
	parent := s.links.QueueParentOf(ctx, pipe, id)
	cause := pipe.HGet(ctx, s.keys.causes(slot), id)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return d, false, fmt.Errorf("deadline: device %q: %w", id, err)
	}
	if d, found, err = s.deviceFrom(ctx, id, score, state); err != nil {
		return d, false, err
	}
	if v, err := act.Result(); err == nil && v < dormantAfter {
		d.NextAct = time.UnixMilli(actMillis(v))
	}
	d.Parked = dead.Err() == nil
	d.Parent = parent.Val()
	if d.Incident != nil {
		d.Cause = causeOfIncident(cause.Val(), d.Incident.Deadline)
	} else if !d.Deadline.IsZero() {
		d.Cause = causeOfIncident(cause.Val(), d.Deadline.UnixMilli())
	}
	if found {
		one := []Device{d}
		if err := s.fillLastSignals(ctx, one, func(int) int { return slot }); err != nil { // scheduled types only
			return d, false, err
		}
		d = one[0]
	}
	return d, found, nil
}

// deviceFrom builds a device from its deadlines-set score and state-hash field as a pipeline read them
// (either may be missing): its deadline, open incident and type.
func (s *Store) deviceFrom(ctx context.Context, id string, score *redis.FloatCmd, state *redis.StringCmd) (d Device, found bool, err error) {
	d.ID = id
	typeIdx := 0
	if v, err := score.Result(); err == nil {
		found = true
		d.Deadline, typeIdx = scoreDeadline(v)
	}
	if v, err := state.Result(); err == nil {
		st, err := decodeState(v)
		if err != nil {
			return d, false, err
		}
		found = true
		d.Incident = &st
		if d.Deadline.IsZero() {
			typeIdx = st.TypeIndex
		}
	}
	d.Type, d.OwnTimeout = s.typeOf(ctx, typeIdx)
	d.LastSignal = s.deviceLastSignal(ctx, d, typeIdx)
	return d, found, nil
}

// ListOptions selects a page of devices.
type ListOptions struct {
	Interrupted bool   // false: devices in the deadlines set; true: devices with an open incident
	Type        string // "" = every type; devices with their own timeout are listed under their type
	Limit       int    // a target: a page may hold somewhat more, never skips any
	Cursor      string // "" = from the start
}

// listScanFactor bounds the entries one page reads to this many times its limit: a filter that matches
// few devices returns a short (even empty) page and a cursor instead of reading the fleet in one request.
const listScanFactor = 10

// List pages through devices slot by slot with SCAN cursors, so it never blocks Redis on a large fleet.
// It returns the cursor of the next page, "" at the end. A page reads at most listScanFactor × Limit
// entries, so with a type filter a page may be short or empty while the cursor goes on.
func (s *Store) List(ctx context.Context, opts ListOptions) ([]Device, string, error) {
	slot, cur, err := parseCursor(opts.Cursor)
	if err != nil {
		return nil, "", err
	}
	limit := opts.Limit
	if limit <= 0 {
		limit = 100
	}
	if opts.Type != "" && !s.types.MayHold(opts.Type) {
		// Another replica may have registered it since this one read the registry.
		if err := s.types.Reload(ctx); err != nil {
			return nil, "", err
		}
		if !s.types.MayHold(opts.Type) {
			return nil, "", nil // no device can be of a type the registry never named
		}
	}
	var out []Device
	slots := s.Slots()
	budget := listScanFactor * limit
	for read := 0; slot < slots && len(out) < limit && read < budget; {
		count := int64(max(limit-len(out), 10))
		var keys []string
		var next uint64
		if opts.Interrupted {
			keys, next, err = s.rdb.HScan(ctx, s.keys.state(slot), cur, "", count).Result()
		} else {
			keys, next, err = s.rdb.ZScan(ctx, s.keys.Deadlines(slot), cur, "", count).Result()
		}
		if err != nil {
			return nil, "", fmt.Errorf("deadline: list slot %d: %w", slot, err)
		}
		read += len(keys) / 2
		for i := 0; i+1 < len(keys); i += 2 {
			if keys[i] == stateGuardField {
				continue
			}
			d := Device{ID: keys[i]}
			if opts.Interrupted {
				st, err := decodeState(keys[i+1])
				if err != nil {
					continue
				}
				if st.Hold == HoldQuiet && st.Next == 0 {
					continue // a deadline moved by a quiet interval is no incident (docs/schedules.md)
				}
				d.Incident = &st
				d.Type, d.OwnTimeout = s.typeOf(ctx, st.TypeIndex)
				d.LastSignal = s.deviceLastSignal(ctx, d, st.TypeIndex)
			} else {
				v, _ := strconv.ParseFloat(keys[i+1], 64)
				var idx int
				d.Deadline, idx = scoreDeadline(v)
				d.Type, d.OwnTimeout = s.typeOf(ctx, idx)
				d.LastSignal = s.deviceLastSignal(ctx, d, idx)
			}
			if opts.Type == "" || opts.Type == d.Type {
				out = append(out, d)
			}
		}
		if next == 0 {
			slot, cur = slot+1, 0
		} else {
			cur = next
		}
	}
	ids := make([]string, len(out))
	for i, d := range out {
		ids[i] = d.ID
	}
	parents, err := s.links.ParentsOf(ctx, ids) // reads nothing in a fleet without parents
	if err != nil {
		return nil, "", err
	}
	for i := range out {
		out[i].Parent = parents[i]
	}
	if err := s.fillLastSignals(ctx, out, func(i int) int { return Slot(out[i].ID, slots) }); err != nil {
		return nil, "", err
	}
	if err := s.fillCauses(ctx, out, func(i int) int { return Slot(out[i].ID, slots) }); err != nil {
		return nil, "", err
	}
	if slot >= slots {
		return out, "", nil
	}
	return out, fmt.Sprintf("%d.%d", slot, cur), nil
}

func parseCursor(c string) (slot int, cur uint64, err error) {
	if c == "" {
		return 0, 0, nil
	}
	a, b, ok := strings.Cut(c, ".")
	if ok {
		if slot, err = strconv.Atoi(a); err == nil {
			if cur, err = strconv.ParseUint(b, 10, 64); err == nil && slot >= 0 {
				return slot, cur, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("%w %q", ErrBadCursor, c)
}

// ErrBadCursor is wrapped by List when the cursor was not one it returned.
var ErrBadCursor = errors.New("deadline: bad cursor")

// Counts are device totals over all slots.
type Counts struct {
	Online      int64 // devices in the deadlines sets
	Interrupted int64 // open incidents
	Parked      int64 // claims parked in the dead sets
	Pending     int64 // alarm entries (interrupted devices waiting for their next act, incl. leased claims)
}

// Count totals the slots in one round trip (O(slots) cardinality reads).
func (s *Store) Count(ctx context.Context) (Counts, error) {
	pipe := s.rdb.Pipeline()
	type slotCmds struct {
		online, state, dead, alarms, records *redis.IntCmd
		guarded                              *redis.BoolCmd
	}
	cmds := make([]slotCmds, s.Slots())
	for slot := range cmds {
		cmds[slot] = slotCmds{
			pipe.ZCard(ctx, s.keys.Deadlines(slot)), pipe.HLen(ctx, s.keys.state(slot)),
			pipe.ZCard(ctx, s.keys.dead(slot)), pipe.ZCard(ctx, s.keys.alarms(slot)),
			pipe.HLen(ctx, s.keys.inFlight(slot)), pipe.HExists(ctx, s.keys.state(slot), stateGuardField),
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return Counts{}, fmt.Errorf("deadline: count: %w", err)
	}
	var c Counts
	for _, sc := range cmds {
		c.Online += sc.online.Val()
		c.Interrupted += sc.state.Val()
		if sc.guarded.Val() {
			c.Interrupted--
		}
		c.Parked += sc.dead.Val()
		// An in-flight record's lease is a member of the alarms set too, one per record in the hash.
		c.Pending += max(sc.alarms.Val()-sc.records.Val(), 0)
	}
	return c, nil
}

// CountByType counts online and interrupted devices per type. It scans every device (SCAN, never
// blocking Redis), so it costs O(devices): callers cache it.
func (s *Store) CountByType(ctx context.Context) (online, interrupted map[string]int64, err error) {
	slots := make([]int, s.Slots())
	for i := range slots {
		slots[i] = i
	}
	return s.CountTypesIn(ctx, slots, loop.Pacer{}) // an operator waits for it
}

// CurrentDeadlines returns, for each claim, the device's deadline in the deadlines set now (zero when it
// is not there): the re-check that tells a recovered device from a silent one. One ZMSCORE per slot, one
// round trip. While a doubling settles, a device's new slot is looked at too (it writes there now).
//
// Fresh claims and committed suppressions are not looked up outside a doubling: the claim script took
// the first out of the deadlines set and checked the second's a moment ago, so the re-check would cost a
// round trip per batch to find almost always nothing. A signal that did arrive since is not lost: the
// acknowledgement, or for a claim left as committed the signal itself, makes the device due at once, so
// `recovered` follows within one wake-up.
func (s *Store) CurrentDeadlines(ctx context.Context, claims []Claim) ([]time.Time, error) {
	out := make([]time.Time, len(claims))
	if len(claims) == 0 {
		return out, nil
	}
	layout := s.layouts.Load()
	slots := layout.Slots
	bySlot := map[int][]int{}
	for i, c := range claims {
		if (c.Fresh || c.CommittedSuppression) && !layout.Moving() {
			continue
		}
		bySlot[c.Slot] = append(bySlot[c.Slot], i)
		if now := Slot(c.Device, slots); now != c.Slot {
			bySlot[now] = append(bySlot[now], i)
		}
	}
	if len(bySlot) == 0 {
		return out, nil
	}
	err := s.deadlineScores(ctx, bySlot, func(i int) string { return claims[i].Device }, func(i int, score float64) {
		if dl, _ := scoreDeadline(score); dl.After(out[i]) {
			out[i] = dl
		}
	})
	if err != nil {
		return nil, fmt.Errorf("deadline: current deadlines: %w", err)
	}
	return out, nil
}

// deadlineScores reads, with one ZMSCORE per slot in one round trip, the deadlines-set scores of the
// devices bySlot lists (slot → indexes, deviceOf(i) naming index i), and calls found for each one there.
func (s *Store) deadlineScores(ctx context.Context, bySlot map[int][]int, deviceOf func(i int) string, found func(i int, score float64)) error {
	pipe := s.rdb.Pipeline()
	cmds := make(map[int]*redis.FloatSliceCmd, len(bySlot))
	for slot, idx := range bySlot {
		members := make([]string, len(idx))
		for j, i := range idx {
			members[j] = deviceOf(i)
		}
		cmds[slot] = pipe.ZMScore(ctx, s.keys.Deadlines(slot), members...)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for slot, idx := range bySlot {
		// go-redis reports a missing member as 0.
		for j, v := range cmds[slot].Val() {
			if v > 0 {
				found(idx[j], v)
			}
		}
	}
	return nil
}

// Silent reports, per device, whether it is absent from the deadlines set: it has not signalled since
// its deadline passed (or was never seen). One ZMSCORE per slot, one round trip.
func (s *Store) Silent(ctx context.Context, devices []string) ([]bool, error) {
	out := make([]bool, len(devices))
	for i := range out {
		out[i] = true
	}
	l := s.layouts.Load()
	bySlot := map[int][]int{}
	for i, d := range devices {
		bySlot[Slot(d, l.Slots)] = append(bySlot[Slot(d, l.Slots)], i)
		if old, moved := l.OldSlot(d); moved {
			bySlot[old] = append(bySlot[old], i)
		}
	}
	err := s.deadlineScores(ctx, bySlot, func(i int) string { return devices[i] }, func(i int, _ float64) { out[i] = false })
	if err != nil {
		return nil, fmt.Errorf("deadline: silent: %w", err)
	}
	return out, nil
}
