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

// DefaultWalkShare is the share of Redis's time each of heartbeatd's periodic walks may take.
const DefaultWalkShare = 0.02

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
