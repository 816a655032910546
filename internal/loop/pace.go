package loop

import (
	"context"
	"time"
)

// Pacer spreads a walk over a large data set (every device of a slot, every open incident) so that it
// keeps Redis busy at most Share of the time, whatever the data set's size: after each step that took
// d, Wait sleeps d × (1 − Share) / Share. A walk of a ten times larger fleet then takes ten times as
// long instead of costing ten times as much Redis time per second. The zero Pacer does not pace.
type Pacer struct {
	// Share of the time the walk may keep Redis busy, in (0, 1); outside that range Wait returns at once.
	Share float64
}

// DefaultWalkShare is the share of Redis's time each of heartbeatd's periodic walks may take, for the
// whole fleet: the replicas walking their parts of it share it (Of).
const DefaultWalkShare = 0.02

// Of is the pacer of a walk over part of whole, the other parts walked by other processes at the same
// time (a replica's owned slots among all of them): the share scales by part/whole, so the walks
// together keep Redis busy at most p.Share of the time however many replicas there are, and each takes
// as long as one walk over the whole would. A Pacer that does not pace, or a part that is the whole or
// empty, is returned as it is.
func (p Pacer) Of(part, whole int) Pacer {
	if p.Share <= 0 || p.Share >= 1 || part <= 0 || part >= whole {
		return p
	}
	return Pacer{Share: p.Share * float64(part) / float64(whole)}
}

// Wait sleeps after a step that took took; it reports false when ctx ended first.
func (p Pacer) Wait(ctx context.Context, took time.Duration) bool {
	if p.Share <= 0 || p.Share >= 1 || took <= 0 {
		return ctx.Err() == nil
	}
	return Sleep(ctx, time.Duration(float64(took)*(1-p.Share)/p.Share))
}

// Step runs step, then waits as Wait does for the time it took; it returns step's error, or ctx's when
// ctx ended during the wait.
func (p Pacer) Step(ctx context.Context, step func() error) error {
	start := time.Now()
	if err := step(); err != nil {
		return err
	}
	if !p.Wait(ctx, time.Since(start)) {
		return ctx.Err()
	}
	return nil
}
