package benchrig

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// Published is what the benchmarks read of one event Kafka acknowledged, with the wall-clock time Publish
// returned. It keeps only those fields, times in UTC (no location pointer), because the recorder shares
// the process with the detection it measures: a million whole events (≈ 190 B and nine pointers each)
// cost that detection copying and GC scanning that the daemon never does.
type Published struct {
	Kind                  event.Kind
	DeviceID              string
	Deadline, At, AckedAt time.Time
	// Explained: the event names its outage or its parent, so a consumer does not page on it.
	Explained bool
}

// Recorder sits in front of a real event.Sink and records every event it acknowledged.
type Recorder struct {
	next  event.Sink
	mu    sync.Mutex
	got   []Published
	count map[event.Kind]int
}

// newRecorder returns a Recorder publishing through next, with room for expected events before it grows.
func newRecorder(next event.Sink, expected int) *Recorder {
	return &Recorder{next: next, got: make([]Published, 0, expected), count: map[event.Kind]int{}}
}

// Publish implements event.Sink.
func (r *Recorder) Publish(ctx context.Context, events []event.Event) []error {
	errs := r.next.Publish(ctx, events)
	acked := time.Now().UTC()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, e := range events {
		if errs[i] == nil {
			r.got = append(r.got, Published{Kind: e.Kind, DeviceID: e.DeviceID, Deadline: e.Deadline.UTC(), At: e.At.UTC(), AckedAt: acked,
				Explained: e.OutageID != "" || e.Parent != ""})
			r.count[e.Kind]++
		}
	}
	return errs
}

// Wait polls until n events of kind were acknowledged — counting only devices whose id starts with
// prefix, when prefix is not empty — and returns every event so far.
func (r *Recorder) Wait(ctx context.Context, kind event.Kind, prefix string, n int, timeout time.Duration) ([]Published, error) {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		r.mu.Lock()
		count, got := r.count[kind], r.got
		r.mu.Unlock()
		if prefix != "" && count >= n {
			count = 0
			for _, p := range got {
				if p.Kind == kind && strings.HasPrefix(p.DeviceID, prefix) {
					count++
				}
			}
		}
		if count >= n {
			return got, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("benchrig: %d of %d %s events after %s", count, n, kind, timeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// snapshot returns every event acknowledged so far.
func (r *Recorder) snapshot() []Published {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got
}

// Reset forgets what was recorded.
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	// A new slice of the same room: callers may still hold the old one (snapshot, Wait).
	r.got, r.count = make([]Published, 0, cap(r.got)), map[event.Kind]int{}
}
