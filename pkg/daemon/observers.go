package daemon

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// output is a loop that runs beside the scanners for an observer (an output that follows Kafka).
type output struct {
	name string
	run  func(ctx context.Context) error
}

// buildObservers makes what follows the events Kafka acknowledged: each gets them through
// event.Observed after the publisher, so none can block or slow the Kafka path.
func (d *daemon) buildObservers(reg prometheus.Registerer) error {
	// The status page's live streams and recent events: bounded queues, a slow page is dropped.
	d.stream = NewEventStream(StreamOptions{Registerer: reg, Logger: d.log})
	d.observers = append(d.observers, d.stream)
	return nil
}
