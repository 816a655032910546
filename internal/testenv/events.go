package testenv

import (
	"context"
	"slices"
	"sync"

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

// EventLog keeps the events a test's publisher took, for the test to take in turn. Safe for concurrent
// use; the zero value is ready.
type EventLog struct {
	mu  sync.Mutex
	got []event.Event
}

// Append keeps events.
func (l *EventLog) Append(events ...event.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, events...)
}

// Publish keeps events and reports each taken: an event.Sink that never fails.
func (l *EventLog) Publish(_ context.Context, events []event.Event) []error {
	l.Append(events...)
	return make([]error, len(events))
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
