package testenv

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// Events collects what heartbeatd publishes on EventsTopic (pass its Add to Kafka.Consume), by device id;
// an outage's events are under its group. Safe for concurrent use.
type Events struct {
	mu    sync.Mutex
	byDev map[string][]event.Event
	total int
	bad   []string
}

// NewEvents returns an empty collector.
func NewEvents() *Events { return &Events{byDev: map[string][]event.Event{}} }

// Add decodes r and files it under its device; a record that does not decode is kept in Bad.
func (e *Events) Add(r Record) {
	ev, err := event.Decode(r.Value)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.bad = append(e.bad, err.Error())
		return
	}
	e.byDev[ev.DeviceID] = append(e.byDev[ev.DeviceID], ev)
	e.total++
}

// Of is device's events in the order they were read.
func (e *Events) Of(device string) []event.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.byDev[device])
}

// Bad is why each record that did not decode failed.
func (e *Events) Bad() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.bad)
}

// Total is how many events decoded.
func (e *Events) Total() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.total
}

// EventLog is the event.Sink of a test: it keeps the events it took, for the test to take in turn. With
// Next set it publishes through Next and keeps only what Next acknowledged (what Kafka took); SetDown
// makes it refuse everything, like an unreachable broker. Safe for concurrent use; the zero value keeps
// every event.
type EventLog struct {
	Next event.Sink
	down atomic.Bool
	mu   sync.Mutex
	got  []event.Event
}

// Append keeps events.
func (l *EventLog) Append(events ...event.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, events...)
}

// SetDown makes Publish refuse every event while down.
func (l *EventLog) SetDown(down bool) { l.down.Store(down) }

// Publish keeps events, or while down refuses each; with Next it keeps those Next acknowledged, a
// batch at once, so a Take never sees half of it.
func (l *EventLog) Publish(ctx context.Context, events []event.Event) []error {
	errs := make([]error, len(events))
	switch {
	case l.down.Load():
		for i := range errs {
			errs[i] = errors.New("kafka: broker unreachable")
		}
		return errs
	case l.Next != nil:
		errs = l.Next.Publish(ctx, events)
	}
	acked := make([]event.Event, 0, len(events))
	for i, e := range events {
		if errs[i] == nil {
			acked = append(acked, e)
		}
	}
	l.Append(acked...)
	return errs
}

// Of is device's events kept, in order, without taking them.
func (l *EventLog) Of(device string) []event.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []event.Event
	for _, e := range l.got {
		if e.DeviceID == device {
			out = append(out, e)
		}
	}
	return out
}

// All returns the events kept, without taking them.
func (l *EventLog) All() []event.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.got)
}

// Take returns the events kept since the last Take.
func (l *EventLog) Take() []event.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.got
	l.got = nil
	return out
}

// Kinds lists the kinds of events, in order.
func Kinds(events []event.Event) []event.Kind {
	out := make([]event.Kind, len(events))
	for i, e := range events {
		out[i] = e.Kind
	}
	return out
}
