package deadline

import (
	"context"
	"fmt"
	"time"
)

// A Redis that lost heartbeatd's data comes back empty; the layout's tracker notices it at its next read
// (internal/slotlayout, datalost.go). Then what the store remembers having written is wrong:
//   - parent links it remembers are written again by each child's next signal, not 10 minutes later, so
//     a gateway that falls silent after the loss is still one event and not a storm of its children;
//   - the type names it knows go back into the registry under the indexes the scores already use, so a
//     replica that starts after the loss gives no name another index;
//   - the per-device timeouts it applies go back into their table (SyncOverrides), so a device with a
//     longer timeout than its type's is not reported at its type's deadline.
//
// The types it remembers per device stay: an untyped signal keeps its device's type, and its write
// records the type in Redis again. The silences go back too (internal/silence, Silences.Load). What Redis alone held
// (devices silent since before the loss, open incidents, registrations as such, parked events) is gone;
// DataLost lets the daemon say so.

// DataLost returns how many times this store found Redis without the data it had written, and when it
// last did (zero time: never).
func (s *Store) DataLost() (int64, time.Time) { return s.layouts.DataLost() }

// CheckDataLost reads the layout again and returns DataLost's count: for a caller that found less in
// Redis than it knew, to tell a deletion from a loss the heartbeat has not noticed yet.
func (s *Store) CheckDataLost(ctx context.Context) (int64, error) {
	n, err := s.layouts.CheckDataLost(ctx)
	if err != nil {
		return 0, fmt.Errorf("deadline: %w", err)
	}
	return n, s.payTypes(ctx)
}

// dataLost forgets what the store remembers having written and owes the type registry its names.
func (s *Store) dataLost() {
	s.links.ForgetAll()
	s.views.ForgetAll()
	s.typesOwed.Store(true)
	s.overrides.MarkLost()
}

// payTypes writes the type registry back while it is owed, at each layout read until it succeeds: a
// registration before it would give a lost name a new index, where the scores carry the old one.
func (s *Store) payTypes(ctx context.Context) error {
	if !s.typesOwed.Load() {
		return nil
	}
	if err := s.types.Restore(ctx); err != nil {
		return err
	}
	s.typesOwed.Store(false)
	return nil
}
