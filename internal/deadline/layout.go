package deadline

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Layout is the slot count in force and, while a doubling settles, the count before it.
//
// Doubling from N to 2N needs no data migration: writers use 2N at once, so a device whose new slot is
// s+N writes there and drops its old entry in slot s (reading it first, so a deadline never moves back and
// an untyped signal keeps its type). A device that stays silent is claimed from its old slot. Claims of a
// moved device check the other slot and are undone when it holds a newer deadline (a replica that had not
// seen the new layout yet); the recovery re-check and the recovery probe look at both slots. Once the
// longest timeout plus one repeat cycle has passed, every old entry has come due: the few open incidents
// left in old slots are moved to their new slot and the old layout is retired (hb:layout records it all).
type Layout struct {
	Slots     int
	Previous  int       // the count before the last doubling while it settles; 0 = settled
	ChangedAt time.Time // when the last doubling began
	// Epoch names the data Redis holds: it is drawn when the layout is first written, so a Redis that
	// lost heartbeatd's data shows a new one (datalost.go). "" until the layout was read.
	Epoch string
	// Losses counts the data losses replicas noticed on Redis masters other than the layout's (a Redis
	// Cluster master restarted empty), so that every replica reacts to each (datalost.go).
	Losses int64
}

// Moving reports whether a doubling is settling.
func (l Layout) Moving() bool { return l.Previous > 0 }

// oldSlot returns the device's slot under the previous count when a doubling is settling and it differs.
func (l Layout) oldSlot(device string) (int, bool) {
	if l.Previous == 0 {
		return 0, false
	}
	o := Slot(device, l.Previous)
	return o, o != Slot(device, l.Slots)
}

// layoutScript reads, initialises or doubles the layout.
//
// KEYS[1] layout hash
// ARGV[1] slots to initialise with  ARGV[2] now (ms)  ARGV[3] "double" to double, "" to read
// ARGV[4] an epoch for a layout that has none yet (a new one, or one an older version wrote)
// Reply: {slots, previous, changed_at ms, epoch, losses}, or an error when a doubling is asked while one
// settles.
var layoutScript = redis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], 'slots'))
if not cur then
  cur = tonumber(ARGV[1])
  redis.call('HSET', KEYS[1], 'slots', cur)
end
redis.call('HSETNX', KEYS[1], 'epoch', ARGV[4])
local epoch = redis.call('HGET', KEYS[1], 'epoch')
local prev = tonumber(redis.call('HGET', KEYS[1], 'previous') or '0')
local changed = tonumber(redis.call('HGET', KEYS[1], 'changed_at') or '0')
local losses = tonumber(redis.call('HGET', KEYS[1], 'losses') or '0')
if ARGV[3] == 'double' then
  if prev > 0 then
    return redis.error_reply('the doubling from ' .. prev .. ' to ' .. cur .. ' slots is still settling')
  end
  if cur * 2 > 16384 then return redis.error_reply('16384 slots is the most') end
  redis.call('HSET', KEYS[1], 'slots', cur * 2, 'previous', cur, 'changed_at', ARGV[2])
  return {cur * 2, cur, tonumber(ARGV[2]), epoch, losses}
end
return {cur, prev, changed, epoch, losses}
`)

// ErrHalving is returned when the configured slot count is below the fleet's: slots can only be doubled.
var ErrHalving = errors.New("deadline: halving the slot count is not supported")

// SyncLayout adopts the fleet's slot layout from Redis, initialising it with configured the first time.
// A configured count twice the fleet's doubles it (the admin path: change redis.slots, restart or reload
// the replicas one by one); a smaller count is refused with ErrHalving; a larger step is refused.
func (s *Store) SyncLayout(ctx context.Context, configured int) (Layout, error) {
	l, err := s.runLayout(ctx, configured, "")
	if err != nil {
		return l, err
	}
	switch {
	case configured == l.Slots:
	case configured < l.Slots:
		return l, fmt.Errorf("%w: redis.slots is %d but the fleet in Redis uses %d; set redis.slots to %d", ErrHalving, configured, l.Slots, l.Slots)
	case configured == 2*l.Slots:
		if l, err = s.runLayout(ctx, configured, "double"); err != nil {
			return l, err
		}
	default:
		return l, fmt.Errorf("deadline: redis.slots %d: the fleet uses %d slots; double one step at a time (%d)", configured, l.Slots, 2*l.Slots)
	}
	return l, nil
}

// doubleSlots doubles the fleet's slot count online; every replica adopts it within one ownership
// heartbeat.
func (s *Store) doubleSlots(ctx context.Context) (Layout, error) {
	return s.runLayout(ctx, s.Slots(), "double")
}

// RefreshLayout re-reads the layout from Redis (every replica does it on each ownership heartbeat).
func (s *Store) RefreshLayout(ctx context.Context) (Layout, error) {
	return s.runLayout(ctx, s.Slots(), "")
}

func (s *Store) runLayout(ctx context.Context, slots int, op string) (Layout, error) {
	v, err := layoutScript.Run(ctx, s.rdb, []string{s.keys.Layout()}, slots, s.now().UnixMilli(), op, newEpoch()).Result()
	if err != nil {
		return s.Layout(), fmt.Errorf("deadline: slot layout: %w", err)
	}
	r := replyReader{script: "layout"}
	f := r.fields(v, 5)
	if r.err != nil {
		return s.Layout(), r.err
	}
	l := Layout{Slots: int(r.int(f[0], "slots")), Previous: int(r.int(f[1], "previous")), Epoch: r.string(f[3], "epoch"),
		Losses: r.int(f[4], "losses")}
	if changed := r.int(f[2], "changed_at"); changed > 0 {
		l.ChangedAt = time.UnixMilli(changed)
	}
	switch {
	case r.err != nil:
		return s.Layout(), r.err
	case l.Slots <= 0 || l.Slots&(l.Slots-1) != 0:
		return s.Layout(), fmt.Errorf("deadline: slot layout in Redis has %d slots, not a power of two", l.Slots)
	}
	before := s.layout.Swap(&l)
	s.followLosses(ctx, *before, l)
	return l, s.payTypes(ctx)
}

// movedSignal is what Redis held for a device whose slot changed in a doubling.
type movedSignal struct {
	oldSlot          int
	newScore         float64 // 0 = none
	oldScore         float64 // 0 = none
	oldIncidentType  int     // -1 = none
	oldIncidentAt    int64   // deadline (ms) of the old slot's open incident
	hasIncidentState bool
}

// predatesIncident reports a replayed or late signal whose deadline is not past the old slot's open
// incident: it says nothing new. Written to the new slot it would be claimed there as a fresh incident
// (the incident's state lives in the old slot), so the outage would be reported again under a second id.
func (m movedSignal) predatesIncident(score int64) bool {
	return m.hasIncidentState && score/MaxTypes <= m.oldIncidentAt
}

type movedSignals map[int]movedSignal // index in the batch → what Redis holds

// score is the deadline score to write for a moved device: never behind what either slot holds, with the
// signal's type, else the type recorded in the new slot, the old slot, or the old slot's open incident,
// under the lead that type has now.
func (m movedSignal) score(ctx context.Context, sig Signal, s *Store) (int64, error) {
	name := sig.Type
	if name == "" {
		t := -1
		for _, sc := range []float64{m.newScore, m.oldScore} {
			if t < 0 && sc > 0 {
				_, t = scoreDeadline(sc)
			}
		}
		if t < 0 && m.hasIncidentState {
			t = m.oldIncidentType
		}
		name = s.types.Name(ctx, max(t, 0))
	}
	r, err := s.resolve(ctx, name)
	if err != nil {
		return 0, err
	}
	dl, _ := s.deadlineAt(r.name, r.lead, sig.Seen)
	score := dl*MaxTypes + int64(r.idx)
	return max(score, int64(m.newScore), int64(m.oldScore)), nil
}

// resolveMoved reads, in one round trip, what both slots hold for the batch's moved devices.
func (s *Store) resolveMoved(ctx context.Context, l *Layout, signals []Signal) (movedSignals, error) {
	type lookup struct {
		newScore, oldScore *redis.FloatCmd
		state              *redis.StringCmd
		oldSlot            int
	}
	pipe := s.rdb.Pipeline()
	looks := map[int]lookup{}
	for i, sig := range signals {
		old, ok := l.oldSlot(sig.Device)
		if !ok {
			continue
		}
		looks[i] = lookup{
			newScore: pipe.ZScore(ctx, s.keys.Deadlines(Slot(sig.Device, l.Slots)), sig.Device),
			oldScore: pipe.ZScore(ctx, s.keys.Deadlines(old), sig.Device),
			state:    pipe.HGet(ctx, s.keys.state(old), sig.Device),
			oldSlot:  old,
		}
	}
	if len(looks) == 0 {
		return nil, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("deadline: refresh: read moved devices: %w", err)
	}
	out := make(movedSignals, len(looks))
	for i, lk := range looks {
		m := movedSignal{oldSlot: lk.oldSlot, newScore: lk.newScore.Val(), oldScore: lk.oldScore.Val(), oldIncidentType: -1}
		if v, err := lk.state.Result(); err == nil {
			if st, err := decodeState(v); err == nil {
				m.hasIncidentState, m.oldIncidentType, m.oldIncidentAt = true, st.TypeIndex, st.Deadline
			}
		}
		out[i] = m
	}
	return out, nil
}

// dropStaleMoved undoes fresh claims of moved devices whose other slot holds a newer deadline: the claim
// came from an entry a newer signal superseded. It returns the claims to keep. While a doubling settles it
// costs one round trip per wake-up that claimed a moved device; otherwise nothing.
func (s *Store) dropStaleMoved(ctx context.Context, l *Layout, claims []Claim) ([]Claim, error) {
	type check struct {
		idx   int
		other int
		score *redis.FloatCmd
	}
	var checks []check
	pipe := s.rdb.Pipeline()
	for i, c := range claims {
		if !c.Fresh {
			continue
		}
		old, moved := l.oldSlot(c.Device)
		if !moved {
			continue
		}
		other := old
		if c.Slot == old {
			other = Slot(c.Device, l.Slots)
		}
		checks = append(checks, check{idx: i, other: other, score: pipe.ZScore(ctx, s.keys.Deadlines(other), c.Device)})
	}
	if len(checks) == 0 {
		return claims, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("deadline: claim: check moved devices: %w", err)
	}
	drop := map[int]bool{}
	var undo []Ack
	for _, ch := range checks {
		sc, err := ch.score.Result()
		if err != nil {
			continue // nothing in the other slot: the device is really silent
		}
		c := claims[ch.idx]
		if dl, _ := scoreDeadline(sc); dl.UnixMilli() > c.State.Deadline {
			drop[ch.idx] = true
			a := Ack{Device: c.Device, Slot: c.Slot, Op: Remove, Claimed: c.State.Deadline}
			if c.Replaced != nil {
				a = Ack{Device: c.Device, Slot: c.Slot, Op: Reschedule, Claimed: c.State.Deadline, Next: s.now(), State: *c.Replaced}
			}
			undo = append(undo, a)
		}
	}
	if len(undo) > 0 {
		if _, err := s.Acknowledge(ctx, undo); err != nil {
			return nil, err
		}
	}
	kept := claims[:0]
	for i, c := range claims {
		if !drop[i] {
			kept = append(kept, c)
		}
	}
	return kept, nil
}

// RetireLayout finishes a settled doubling once retireAfter (the longest timeout plus one repeat cycle)
// has passed since it began: the open incidents and any entries left in old slots move to their new slot,
// then the previous count is forgotten. Any replica may call it; a short lock keeps it to one at a time.
// It returns whether the layout was retired.
func (s *Store) RetireLayout(ctx context.Context, retireAfter time.Duration) (bool, error) {
	l := s.Layout()
	if !l.Moving() || s.now().Before(l.ChangedAt.Add(retireAfter)) {
		return false, nil
	}
	lock := s.keys.Layout() + ":retiring"
	ok, err := s.rdb.SetNX(ctx, lock, "1", time.Minute).Result()
	if err != nil || !ok {
		return false, err
	}
	defer s.rdb.Del(context.WithoutCancel(ctx), lock)
	for old := range l.Previous {
		if err := s.migrateSlot(ctx, l, old); err != nil {
			return false, err
		}
	}
	if err := s.rdb.HDel(ctx, s.keys.Layout(), "previous", "changed_at").Err(); err != nil {
		return false, fmt.Errorf("deadline: retire layout: %w", err)
	}
	_, err = s.RefreshLayout(ctx)
	return err == nil, err
}

// migrateSlot moves what moved devices left in old slot to their new slot.
func (s *Store) migrateSlot(ctx context.Context, l Layout, old int) error {
	var cursor uint64
	for {
		kv, next, err := s.rdb.HScan(ctx, s.keys.state(old), cursor, "", 500).Result()
		if err != nil {
			return fmt.Errorf("deadline: retire layout: scan slot %d: %w", old, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			dev, st := kv[i], kv[i+1]
			to := Slot(dev, l.Slots)
			if to == old || dev == stateGuardField {
				continue
			}
			pipe := s.rdb.Pipeline()
			act := pipe.ZScore(ctx, s.keys.alarms(old), dev)
			dead := pipe.ZScore(ctx, s.keys.dead(old), dev)
			if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
				return fmt.Errorf("deadline: retire layout: read %q: %w", dev, err)
			}
			pipe = s.rdb.Pipeline()
			pipe.HSetNX(ctx, s.keys.state(to), dev, st)
			if v, err := act.Result(); err == nil {
				pipe.ZAddNX(ctx, s.keys.alarms(to), redis.Z{Score: v, Member: dev})
			}
			if v, err := dead.Result(); err == nil {
				pipe.ZAddNX(ctx, s.keys.dead(to), redis.Z{Score: v, Member: dev})
			}
			pipe.HDel(ctx, s.keys.state(old), dev)
			pipe.ZRem(ctx, s.keys.alarms(old), dev)
			pipe.ZRem(ctx, s.keys.dead(old), dev)
			if _, err := pipe.Exec(ctx); err != nil {
				return fmt.Errorf("deadline: retire layout: move %q: %w", dev, err)
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	// Deadlines still in the old slot belong to devices silent (or held back) since the doubling.
	cursor = 0
	for {
		kv, next, err := s.rdb.ZScan(ctx, s.keys.Deadlines(old), cursor, "", 500).Result()
		if err != nil {
			return fmt.Errorf("deadline: retire layout: scan slot %d: %w", old, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			dev := kv[i]
			to := Slot(dev, l.Slots)
			if to == old {
				continue
			}
			sc, _ := strconv.ParseFloat(kv[i+1], 64)
			pipe := s.rdb.Pipeline()
			pipe.ZAddArgs(ctx, s.keys.Deadlines(to), redis.ZAddArgs{GT: true, Members: []redis.Z{{Score: sc, Member: dev}}})
			pipe.ZRem(ctx, s.keys.Deadlines(old), dev)
			if _, err := pipe.Exec(ctx); err != nil {
				return fmt.Errorf("deadline: retire layout: move %q: %w", dev, err)
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}
