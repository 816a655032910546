package deadline

import (
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
