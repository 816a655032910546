package deadline

import "testing"

// SetRearmBatch makes RearmType read n entries at a time until tb ends, so a small fleet spans batches.
func SetRearmBatch(tb testing.TB, n int) {
	old := rearmBatch
	rearmBatch = n
	tb.Cleanup(func() { rearmBatch = old })
}
