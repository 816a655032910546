// Package ingest turns the signals a fleet sends over MQTT and Kafka into deadline refreshes.
//
// Signals posted to the HTTP API (internal/daemon) take the same chain as source http: the API cuts a
// request's body into signals (ReadBatch), offers each (Chain.Offer, which also returns a bad signal's
// reason) and answers once every Ack came.
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
// from their brokers and the retried refresh resumes the flow when Redis answers again. Batches are
// acknowledged in the order they were formed. MQTT QoS 0 messages are the exception: nothing acknowledges
// them, so the broker never stops sending; past MQTTOptions.MaxQueuedQoS0 waiting ones they are shed
// (signals_total{result="shed"}), so memory stays bounded at any rate and any Redis speed.
//
// # Rules where docs/signals.md is silent
//
//   - Identity is bound by the transport (docs/signals.md): where the MQTT topic or the Kafka key names the device,
//     a payload device_id must name the same one (else id_mismatch, a seventh reason); it names the device
//     only on a topic without {device_id} or a record without a key (how a gateway publishes for its
//     children). The payload's type wins over the topic's. A JSON null or "" counts as absent.
//   - A payload is a JSON object when its first non-space byte is '{'; anything else (empty, binary, other
//     JSON values) is an opaque heartbeat. Keys match exactly (case-sensitive); a duplicate key's last
//     value wins.
//   - ts: an RFC 3339 string, or a number (seconds below 1e11, else milliseconds), from 1970 to the year
//     5138; a numeric string, a negative number or any other value is bad_ts. A ts more than
//     max_clock_skew past the receive time is replaced by the receive time; an old ts is kept (the
//     deadline just does not move back). A signal whose deadline already passed is late (docs/signals.md):
//     acknowledged and counted, not written; it moves nothing, last_seen included (Chain.write).
//   - A type name follows the device-id rules; one that does not, or a `type` that is not a string, is
//     dead-lettered as invalid_type (a sixth reason beside docs/signals.md's five). A valid name without a
//     configured policy is written as the default type: only configured names reach Redis.
//   - MQTT retained messages are acknowledged and counted (result "retained") but never applied: a broker
//     replays them on every subscribe, so they would mark long-silent devices alive at each reconnect.
//   - A new Kafka group starts at the oldest retained offset: replaying old signals never moves a
//     deadline back, and skipping them could miss devices that went silent while no group existed.
//   - Dead letters are retried for ChainOptions.DeadLetterTimeout, then the bad message is acknowledged
//     without one (heartbeatd_deadletters_lost_total): bad input must never stall the good. A flood of
//     bad input larger than the dead-letter queue waits for room while the topic takes writes (a few ms
//     for valid neighbours), and is dropped at once while the topic refuses them.
//
// # Broker settings that matter
//
// A QoS 1 message is held unacknowledged until its Redis write, so MQTT throughput is bounded by the
// broker's in-flight window per client (mosquitto max_inflight_messages, default 20): raise it (e.g.
// 1000) for a large fleet; the window is also what bounds the messages heartbeatd holds in memory during
// a Redis outage (never set it to 0, unlimited: past 4096 waiting messages paho's reader then stalls,
// and with it the keep-alives). Raise max_queued_messages (default 1000) so a persistent session keeps
// what a restart or outage leaves behind. Each replica needs its own client_id; share the load with
// shared_group.
package ingest
