package testenv

import (
	"sync"
	"time"
)

// Clock is a settable time source a test shares with the code under test (pass its Now where a
// `now func() time.Time` is taken), so the test decides when deadlines pass. Safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock that reads t until it is moved.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

// TypeTimeouts is a deadline.Options.Timeout from a table: a type's own entry, and the "default" entry for
// a type the table does not name, as the configured policies fall back to default.
func TypeTimeouts(byType map[string]time.Duration) func(typeName string) time.Duration {
	return func(typeName string) time.Duration {
		if d, ok := byType[typeName]; ok {
			return d
		}
		return byType["default"]
	}
}

// AllSlots lists slots 0 to n-1: every slot of a store of n slots, as one replica owning them all claims.
func AllSlots(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}
