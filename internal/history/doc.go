// Package history keeps each device's past incidents in Redis, the same from every replica, and the
// per-day figures availability is answered from (docs/concepts.md#incident-history). It is fed by the
// events the daemon publishes: Recorder wraps the publisher, and after Kafka took an event folds it into
// its device's incidents with the incident machine of pkg/event. Nothing is written on the signal path.
package history
