// Package history keeps each device's past incidents in Redis, the same from every replica, and the
// per-day figures availability is answered from (docs/concepts.md#incident-history). It is fed by the
// events the daemon publishes: every replica joins a Kafka consumer group of the events topic (Consume),
// which folds each event into its device's incidents with the incident machine of pkg/event. Nothing is
// written on the signal path nor on the alarm path.
package history
