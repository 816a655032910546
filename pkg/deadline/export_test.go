package deadline

import (
	"context"
	"testing"
	"time"
)

// SetRearmBatch makes RearmType read n entries at a time until tb ends, so a small fleet spans batches.
func SetRearmBatch(tb testing.TB, n int) {
	old := rearmBatch
	rearmBatch = n
	tb.Cleanup(func() { rearmBatch = old })
}

// DeadlineOf exposes deadlineOf to the benchmarks.
func (s *Store) DeadlineOf(name string, seen time.Time) (int64, bool) {
	return s.deadlineOf(name, seen)
}

// AsLinkedByOlderVersion leaves the links of parents as a version without the named-parents sets wrote
// them: no parent in the sets, and the fleet's parents mark 1.
func (s *Store) AsLinkedByOlderVersion(ctx context.Context, parents ...string) error {
	for _, p := range parents {
		if err := s.rdb.SRem(ctx, s.keys.namedParents(p), p).Err(); err != nil {
			return err
		}
	}
	return s.rdb.Set(ctx, s.keys.parentsInUse(), 1, 0).Err()
}

// LoseData is what the store does when it finds that Redis lost data (datalost.go).
func (s *Store) LoseData() { s.dataLost() }

// SetNamed marks every parent as being in the named-parents sets.
func (s *Store) SetNamed(ctx context.Context) error {
	return s.rdb.Set(ctx, s.keys.parentsInUse(), parentsNamed, 0).Err()
}
