package holdback

import (
	"context"
	"slices"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// DegradedSink marks the events published through it "degraded" while degraded reports true for their
// device type (Tracker.DegradedFor): consumers see which alarms were raised while detection could not
// trust the silence of such devices. It sits between the Handler and the real sink, so the state
// machine stays unaware of hold-back. degraded is asked once per batch.
func DegradedSink(next event.Sink, degraded func() func(deviceType string) bool) event.Sink {
	return degradedSink{next: next, degraded: degraded}
}

type degradedSink struct {
	next     event.Sink
	degraded func() func(deviceType string) bool
}

func (s degradedSink) Publish(ctx context.Context, events []event.Event) []error {
	if len(events) == 0 {
		return s.next.Publish(ctx, events)
	}
	of := s.degraded()
	var marked []event.Event // the caller's slice stays as it built it
	for i, e := range events {
		if !of(e.DeviceType) {
			continue
		}
		if marked == nil {
			marked = slices.Clone(events)
		}
		marked[i].Degraded = true
	}
	if marked != nil {
		events = marked
	}
	return s.next.Publish(ctx, events)
}
