// Package defaults fills in what an Options struct left unset, one line per option: every constructor
// of heartbeatd (internal/ingest/chain.go NewChain, internal/sweep New, …) has a list of them.
package defaults

// Positive is v, or def when v is zero or negative: an unset (or meaningless) count, size or duration.
// A zero-or-negative test, not cmp.Or's zero test, so a negative option still falls back as it always did.
func Positive[T ~int | ~int64 | ~float64](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}
