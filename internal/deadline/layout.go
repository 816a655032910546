package deadline

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/slotlayout"
)

// Layout is the slot layout (internal/slotlayout), which every slot's data follows.
type Layout = slotlayout.Layout

// ErrHalving is returned when the configured slot count is below the fleet's: slots can only be doubled.
var ErrHalving = slotlayout.ErrHalving

// ErrStepTooLarge is returned when the configured slot count is more than twice the fleet's.
var ErrStepTooLarge = slotlayout.ErrStepTooLarge

// SyncLayout adopts the fleet's slot layout from Redis (slotlayout.Tracker.Sync).
func (s *Store) SyncLayout(ctx context.Context, configured int) (Layout, error) {
	l, err := s.layouts.Sync(ctx, configured)
	return s.adopt(ctx, l, err)
}

// doubleSlots doubles the fleet's slot count online; every replica adopts it within one ownership
// heartbeat.
func (s *Store) doubleSlots(ctx context.Context) (Layout, error) {
	l, err := s.layouts.Double(ctx)
	return s.adopt(ctx, l, err)
}

// RefreshLayout re-reads the layout from Redis (every replica does it on each ownership heartbeat).
func (s *Store) RefreshLayout(ctx context.Context) (Layout, error) {
	l, err := s.layouts.Refresh(ctx)
	return s.adopt(ctx, l, err)
}

// adopt follows a layout read with what the store owes after a data loss (payTypes).
func (s *Store) adopt(ctx context.Context, l Layout, err error) (Layout, error) {
	if err != nil {
		return l, fmt.Errorf("deadline: %w", err)
	}
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
		old, ok := l.OldSlot(sig.Device)
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
		old, moved := l.OldSlot(c.Device)
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
	unlock, ok, err := s.layouts.Retiring(ctx)
	if err != nil || !ok {
		return false, err
	}
	defer unlock()
	for old := range l.Previous {
		if err := s.migrateSlot(ctx, l, old); err != nil {
			return false, err
		}
	}
	l, err = s.layouts.Retire(ctx)
	if _, err := s.adopt(ctx, l, err); err != nil {
		return false, err
	}
	return true, nil
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
