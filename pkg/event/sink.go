package event

import "context"

// Sink is where the alarm loop sends events. Publish is synchronous and returns one error per event,
// aligned with the input, nil where the event was acknowledged by all in-sync replicas: only those may be
// acknowledged in Redis (DESIGN "Publish then acknowledge").
type Sink interface {
	Publish(ctx context.Context, events []Event) []error
}

// DeadLetterSink is where ingest sends bad input.
type DeadLetterSink interface {
	PublishDeadLetter(ctx context.Context, d DeadLetter) error
}
