package deadline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Parent links live in internal/parents (Store.Links); what a parent's verdict is judged on, its own
// deadline and incident, is in the slots, read here. A gateway storm's children are judged against the
// same few hundred parents, batch after batch: a replica remembers the views of the parents that are
// down until any parent's verdict changes (parents.Views; WakeChildren moves the counter before it
// wakes anyone).

// Parent is what the alarm loop needs to know of a device's parent to judge the device's silence.
type Parent struct {
	ID string
	// Known: Redis knows the parent (it signalled once, or is registered). An unknown parent is no
	// excuse: the child alarms on its own.
	Known bool
	// Down: the parent's own interruption (or suppression) was reported and it has not signalled since.
	Down bool
	// LastSignal is the parent's last signal; Deadline its current deadline (the open incident's while
	// it is down).
	LastSignal, Deadline time.Time
}

// readParents reads what the alarm loop needs of each parent from Redis, one round trip for all.
func (s *Store) readParents(ctx context.Context, ids []string) (map[string]Parent, error) {
	out := make(map[string]Parent, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	l := s.layouts.Load()
	if l.Moving() { // rare: an incident may still live in the old slot; Device looks in both
		for _, id := range ids {
			d, found, err := s.Device(ctx, id)
			if err != nil {
				return nil, err
			}
			out[id] = s.parentOf(d, found)
		}
		return out, nil
	}
	type reads struct {
		score *redis.FloatCmd
		state *redis.StringCmd
		seen  *redis.FloatCmd // a scheduled parent's recorded last signal (nil: no type has a schedule)
	}
	scheduled := s.typeExpected != nil
	pipe := s.rdb.Pipeline()
	rs := make([]reads, len(ids))
	for i, id := range ids {
		slot := Slot(id, l.Slots)
		rs[i] = reads{score: pipe.ZScore(ctx, s.keys.Deadlines(slot), id), state: pipe.HGet(ctx, s.keys.state(slot), id)}
		if scheduled {
			rs[i].seen = pipe.ZScore(ctx, s.keys.seen(slot), id)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("deadline: parents: %w", err)
	}
	now := s.now()
	for i, id := range ids {
		d, found, err := s.deviceFrom(ctx, id, rs[i].score, rs[i].state)
		if err != nil {
			return nil, err
		}
		if v := rs[i].seen; v != nil && found {
			if _, ok := s.expected(d.recordedType(), now); ok {
				d.LastSignal = msTime(v.Val())
			}
		}
		out[id] = s.parentOf(d, found)
	}
	return out, nil
}

// parentOf judges one parent from what Redis holds of it.
func (s *Store) parentOf(d Device, found bool) Parent {
	p := Parent{ID: d.ID, Known: found}
	if !found {
		return p
	}
	p.Deadline = d.Deadline
	if inc := d.Incident; inc != nil {
		incDeadline := inc.DeadlineTime()
		if !d.Deadline.After(incDeadline) { // no signal since the incident began
			p.Deadline = incDeadline
			p.Down = inc.Next > 0
		}
	}
	if !d.LastSignal.IsZero() {
		// A scheduled type's deadline is its next expected time, not its last signal + a timeout: its
		// last signal is recorded.
		p.LastSignal = d.LastSignal
		return p
	}
	// A warned type's score is its warning (warn.go); the parent is judged by its own deadline.
	p.LastSignal = p.Deadline.Add(-s.lead(d.recordedType()))
	p.Deadline = p.LastSignal.Add(s.timeout(d.recordedType()))
	return p
}

// Parents reads what the alarm loop needs of each parent: the views of down parents remembered since the
// last verdict change (parents.Views), the others in one round trip. The counter is read first, so a
// view kept is no older than the counter's value it is kept under.
func (s *Store) Parents(ctx context.Context, ids []string) (map[string]Parent, error) {
	out := make(map[string]Parent, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	gen, err := s.links.Verdicts(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	missing := s.views.Lookup(ids, gen, now, out)
	if len(missing) == 0 {
		return out, nil
	}
	read, err := s.readParents(ctx, missing)
	if err != nil {
		return nil, err
	}
	for id, p := range read {
		out[id] = p
	}
	s.views.Keep(read, gen, now, func(p Parent) bool { return p.Down })
	return out, nil
}
