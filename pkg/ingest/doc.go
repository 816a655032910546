// Package ingest turns the signals a fleet sends over MQTT and Kafka into deadline refreshes.
//
// Each transport is a Source. A source pushes every message it receives, together with the function
// that acknowledges it at the broker, into the one Chain. The chain decodes and validates the message,
// resolves the device type, clamps a timestamp from the future, optionally coalesces, batches by count
// and a short linger, writes the batch with one deadline refresh and only then acknowledges the batch's
// messages: a message is never acknowledged (MQTT PUBACK, Kafka offset commit) before its deadline write
// was acknowledged by Redis. Bad input is sent to the dead-letter topic with its reason and acknowledged,
// without holding up the valid messages around it.
//
// Backpressure is the flow control: at most ChainOptions.MaxInFlight batches are between dispatch and
// acknowledgement, so while Redis is unreachable the chain blocks, the sources stop taking messages
// from their brokers and the retried refresh resumes the flow when Redis answers again.
package ingest
