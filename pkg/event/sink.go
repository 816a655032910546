package event

import "context"

// Sink is where the alarm loop sends events. Publish is synchronous and returns one error per event,
// aligned with the input, nil where the event was acknowledged by all in-sync replicas: only those may be
// acknowledged in Redis (docs/concepts.md, "Claim protocol").
type Sink interface {
	Publish(ctx context.Context, events []Event) []error
}

// DeadLetterSink is where ingest sends bad input.
type DeadLetterSink interface {
	PublishDeadLetter(ctx context.Context, d DeadLetter) error
}

// Observer is told of the events Kafka acknowledged, after it did: the outputs that follow Kafka (the
// Alertmanager output, the live stream of the status page) never lead it, block it or slow it. Observe
// must return at once: queue within a bound, or drop.
type Observer interface {
	Observe(events []Event)
}

// Observed returns a sink that publishes through next, then passes the events next acknowledged to each
// observer in order. Events next refused are not observed: they will be published again.
func Observed(next Sink, observers ...Observer) Sink {
	if len(observers) == 0 {
		return next
	}
	return observedSink{next: next, observers: observers}
}

type observedSink struct {
	next      Sink
	observers []Observer
}

func (s observedSink) Publish(ctx context.Context, events []Event) []error {
	errs := s.next.Publish(ctx, events)
	acked := Acknowledged(events, errs)
	if len(acked) > 0 {
		for _, o := range s.observers {
			o.Observe(acked)
		}
	}
	return errs
}

// Acknowledged returns the events whose error in errs (aligned with events, as Sink.Publish returns
// them) is nil: events itself when all are, a copy only when some failed.
func Acknowledged(events []Event, errs []error) []Event {
	for _, err := range errs {
		if err != nil {
			acked := make([]Event, 0, len(events))
			for j, e := range events {
				if errs[j] == nil {
					acked = append(acked, e)
				}
			}
			return acked
		}
	}
	return events
}
