package testenv

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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

// MetricValue is a counter's or gauge's current value, read as Prometheus would scrape it.
func MetricValue(tb testing.TB, m prometheus.Metric) float64 {
	tb.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		tb.Fatalf("testenv: read metric %s: %v", m.Desc(), err)
	}
	if d.Gauge != nil {
		return d.Gauge.GetValue()
	}
	return d.Counter.GetValue()
}

// DeviceIDs names n devices prefix-00000, prefix-00001, …: zero-padded, so they sort in creation order.
func DeviceIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return ids
}

// Repeater runs a step over and over until its test ends; see Repeat.
type Repeater struct {
	mu       sync.Mutex
	failures []string
}

// Repeat runs step at once and then every period on a goroutine that the test's cleanup stops and waits
// for. A failed step does not stop it (a fleet must keep signalling): Failures keeps it for the test to
// check at its end.
func Repeat(tb testing.TB, period time.Duration, step func(ctx context.Context) error) *Repeater {
	ctx, stop := context.WithCancel(context.Background())
	r := &Repeater{}
	done := make(chan struct{})
	go func() { defer close(done); r.run(ctx, period, step) }()
	tb.Cleanup(func() { stop(); <-done })
	return r
}

func (r *Repeater) run(ctx context.Context, period time.Duration, step func(ctx context.Context) error) {
	tk := time.NewTicker(period)
	defer tk.Stop()
	for {
		if err := step(ctx); err != nil && ctx.Err() == nil {
			r.mu.Lock()
			r.failures = append(r.failures, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), err))
			r.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// Failures are the steps that failed so far, each with its time.
func (r *Repeater) Failures() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.failures)
}
