package alarm

import (
	"context"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// DegradedSink marks the events published through it "degraded" while degraded reports true
// (HoldBack.Degraded): consumers see which alarms were raised while detection could not trust silence.
// It sits between the Handler and the real sink, so the state machine stays unaware of hold-back.
func DegradedSink(next event.Sink, degraded func() bool) event.Sink {
	return degradedSink{next: next, degraded: degraded}
}

type degradedSink struct {
	next     event.Sink
	degraded func() bool
}

func (s degradedSink) Publish(ctx context.Context, events []event.Event) []error {
	if len(events) > 0 && s.degraded() {
		marked := make([]event.Event, len(events)) // the caller's slice stays as it built it
		for i, e := range events {
			e.Degraded = true
			marked[i] = e
		}
		events = marked
	}
	return s.next.Publish(ctx, events)
}
