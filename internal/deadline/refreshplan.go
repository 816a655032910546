package deadline

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/typememory"
)

// typedSlot is what one refresh writes to a slot besides the untyped script calls.
type typedSlot struct {
	deadlines []redis.Z
	// incidents: moved devices whose open incident, if any, still lives in this (old) slot; they are
	// probed here besides the slot's own deadlines.
	incidents []any
	// probeNow: probe in the first round trip. A moved device may already have its deadline in the
	// new slot while its open incident still lives in the old one, so its probes never wait.
	probeNow bool
}

// refreshPlan is one refresh's writes, sorted out before the round trip.
type refreshPlan struct {
	typed      map[int]*typedSlot
	oldEntries map[int][]any   // old slot → moved devices to drop from it
	untyped    []Signal        // devices of no known type: the refresh script finds theirs
	retimed    []retimedSignal // devices whose signal changes their type index (retime.go)
	forget     []string        // devices the store's type memory forgets once the batch is written
	retyped    []string        // devices whose signal named another type than the recorded one
	seen       seenWrites
}

func (p *refreshPlan) slot(slot int) *typedSlot {
	ts := p.typed[slot]
	if ts == nil {
		ts = &typedSlot{}
		p.typed[slot] = ts
	}
	return ts
}

// planSignal sorts signal i into the plan: its deadline score in its slot (or the untyped calls), and
// for a device a slot doubling moves, the drop from its old slot and the probe of its incident there.
func (s *Store) planSignal(ctx context.Context, p *refreshPlan, layout *Layout, sig Signal, moved movedSignals, recorded *recorded, i int) error {
	m, isMoved := moved[i]
	rec, source := recorded.of(i)
	known := source != typeUnknown
	if sig.Type == "" && !isMoved && !known {
		p.untyped = append(p.untyped, sig)
		return nil
	}
	var score int64
	if isMoved {
		var err error
		if score, err = m.score(ctx, sig, s); err != nil || m.predatesIncident(score) {
			return err
		}
	} else {
		var r resolved
		var err error
		if sig.Type == "" {
			r, err = s.resolveRecorded(ctx, rec) // its recorded type, under the lead that type has now
		} else {
			r, err = s.resolve(ctx, sig.Type) // an unconfigured name is recorded, and timed, as the default type
		}
		if err != nil {
			return err
		}
		dl, expected := s.deadlineAt(r.name, r.lead, sig.Seen)
		score = dl*MaxTypes + int64(r.idx)
		if expected {
			p.seen.add(Slot(sig.Device, layout.Slots), sig)
		}
		if known && rec != r.idx {
			if !expected {
				// Another index than the stored one: compared by signal times, not deadlines (retime.go).
				// Forgotten, not learned: the write may lose to a newer signal, and the next one reads it.
				if sig.Type != "" && s.types.Name(ctx, rec) != r.name {
					p.retyped = append(p.retyped, sig.Device)
				}
				p.retimed = append(p.retimed, retimedSignal{slot: Slot(sig.Device, layout.Slots), device: sig.Device, score: score,
					seen: sig.Seen.UnixMilli()})
				p.forget = append(p.forget, sig.Device)
				return nil
			}
			if sig.Type != "" {
				p.retyped = append(p.retyped, sig.Device)
			}
		}
		if source != typeRemembered || rec != r.idx {
			recorded.learned = append(recorded.learned, typememory.Learned{Device: sig.Device, Index: r.idx})
		}
	}
	ts := p.slot(Slot(sig.Device, layout.Slots))
	ts.deadlines = append(ts.deadlines, redis.Z{Score: float64(score), Member: sig.Device})
	if isMoved {
		// The open incident, if any, still lives in the old slot until the layout retires.
		old := p.slot(m.oldSlot)
		old.incidents = append(old.incidents, sig.Device)
		ts.probeNow, old.probeNow = true, true
		p.oldEntries[m.oldSlot] = append(p.oldEntries[m.oldSlot], sig.Device)
	}
	return nil
}

// writeRefresh sends the plan in one round trip (the untyped script calls again alone if Redis lost the
// script) and returns each slot's ZADD GT, whose count says whether a deadline moved (a recovery to probe).
func (s *Store) writeRefresh(ctx context.Context, p *refreshPlan, signals []Signal, now int64, probeAll bool) (map[int]*redis.IntCmd, error) {
	pipe := s.rdb.Pipeline()
	added := make(map[int]*redis.IntCmd, len(p.typed))
	var probes []scriptCall
	for slot, ts := range p.typed {
		ts.probeNow = ts.probeNow || probeAll
		if len(ts.deadlines) > 0 {
			added[slot] = pipe.ZAddArgs(ctx, s.keys.Deadlines(slot), redis.ZAddArgs{GT: true, Members: ts.deadlines})
		}
		if ts.probeNow {
			probes = append(probes, s.probeCall(slot, now, ts.deadlines, ts.incidents))
		}
	}
	for slot, devs := range p.oldEntries {
		pipe.ZRem(ctx, s.keys.Deadlines(slot), devs...)
	}
	p.seen.queue(ctx, pipe, s.keys)
	links := s.links.QueueSignals(ctx, pipe, func(yield func(device, parent string) bool) {
		for _, sig := range signals {
			if sig.Parent != "" && !yield(sig.Device, sig.Parent) {
				return
			}
		}
	})
	s.typeMem.QueueRetyped(ctx, pipe, p.retyped)
	checked := s.typeMem.QueueCheck(ctx, pipe)
	calls, err := s.untypedCalls(ctx, p.untyped, now)
	if err != nil {
		return nil, fmt.Errorf("deadline: refresh: %w", err)
	}
	for _, c := range probes {
		probeScript.EvalSha(ctx, pipe, c.Keys, c.Args...)
	}
	for _, c := range calls {
		refreshScript.EvalSha(ctx, pipe, c.Keys, c.Args...)
	}
	retimes := s.retimeCalls(ctx, p.retimed, now)
	for _, c := range retimes {
		retimeScript.EvalSha(ctx, pipe, c.Keys, c.Args...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		if !redis.HasErrorPrefix(err, "NOSCRIPT") {
			return nil, fmt.Errorf("deadline: refresh: %w", err)
		}
		// Redis lost a script (restart, failover): the typed writes went through; send the rest again.
		if _, err := s.runAll(ctx, probeScript, probes); err != nil {
			return nil, fmt.Errorf("deadline: refresh: %w", err)
		}
		if _, err := s.runAll(ctx, refreshScript, calls); err != nil {
			return nil, fmt.Errorf("deadline: refresh: %w", err)
		}
		if _, err := s.runAll(ctx, retimeScript, retimes); err != nil {
			return nil, fmt.Errorf("deadline: refresh: %w", err)
		}
	}
	if len(p.forget) > 0 {
		s.typeMem.Forget(p.forget)
	}
	s.links.Remember(links)
	s.links.Settle(ctx, links)
	checked()
	return added, nil
}
