package history

import (
	"context"

	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// Recording returns a sink that publishes through next and then records, in s, the events next
// acknowledged, before it returns: for events no consumer group reads (tests, the benchmarks' fixtures);
// the daemon records from the events topic instead (Consume), off the alarm path. An event Kafka took but the history could not record is reported failed, like one Kafka
// refused: the alarm loop publishes it again (same id, docs/events.md#ids-and-duplicates) and the
// history, idempotent by event, records it then. So every incident Kafka has is in the history too, once
// Redis answers; the operator acts' events, which are not retried, are recorded in the same call.
func Recording(next event.Sink, s *Store) event.Sink {
	return recorder{next: next, store: s}
}

type recorder struct {
	next  event.Sink
	store *Store
}

func (r recorder) Publish(ctx context.Context, events []event.Event) []error {
	errs := r.next.Publish(ctx, events)
	acked := event.Acknowledged(events, errs)
	if len(acked) == 0 {
		return errs
	}
	if err := r.store.Record(ctx, acked); err != nil {
		r.store.log.Warn("published events not recorded in the history; they are published again", zap.Int("events", len(acked)), zap.Error(err))
		for j := range errs {
			if errs[j] == nil && event.DeviceKind(events[j].Kind) {
				errs[j] = err
			}
		}
	}
	return errs
}
