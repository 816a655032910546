package testenv

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
)

// HeartbeatdConfig wires a heartbeatd config to a test's servers: Redis, MQTT ingest of
// devices/{device_id}/heartbeat, and events to Kafka. The test adds the sections it is about (see YAML).
type HeartbeatdConfig struct {
	Redis    string   // redis.addrs: the one Redis address
	Slots    int      // redis.slots
	MQTT     string   // ingest.mqtt.brokers: the one broker address
	ClientID string   // ingest.mqtt.client_id
	Kafka    []string // events.kafka.brokers
	// Alertmanager are outputs.alertmanager.urls; none leaves the output off. Its other keys go through
	// HEARTBEATD_OUTPUTS_ALERTMANAGER_* (HeartbeatdOptions.Env).
	Alertmanager []string
	// Ingest is more keys of the ingest section (YAML flow, e.g. "offline_grace: 1s"); Subscriptions more
	// entries of ingest.mqtt.subscriptions (YAML flow, e.g. `{topic: "a/{device_id}", presence: offline}`).
	Ingest        string
	Subscriptions []string
}

// YAML is the config file: the servers' sections, then sections (further top-level YAML such as types,
// detection, http, log, shutdown_timeout).
func (c HeartbeatdConfig) YAML(sections string) string {
	return fmt.Sprintf(`
redis: {addrs: [%q], slots: %d}
ingest:
  %s
  mqtt:
    brokers: [%q]
    client_id: %q
    subscriptions: [{topic: "devices/{device_id}/heartbeat"}%s]
events:
  kafka: {brokers: [%q]}
%s`, c.Redis, c.Slots, c.Ingest, c.MQTT, c.ClientID, c.moreSubscriptions(), strings.Join(c.Kafka, ","), c.outputs()) + sections
}

func (c HeartbeatdConfig) moreSubscriptions() string {
	if len(c.Subscriptions) == 0 {
		return ""
	}
	return ", " + strings.Join(c.Subscriptions, ", ")
}

// outputs is the outputs section, when an output is on.
func (c HeartbeatdConfig) outputs() string {
	if len(c.Alertmanager) == 0 {
		return ""
	}
	return "outputs:\n  alertmanager: {urls: [" + QuoteAll(c.Alertmanager) + "]}\n"
}

// KafkaReplicaConfig wires one replica of a suite that signals over Kafka: Redis, ingest of SignalsTopic
// in a consumer group of the replica's own ("hb-<id>"), so a SIGKILLed replica's signals are still read
// by the others, and events to EventsTopic and DeadLetterTopic.
type KafkaReplicaConfig struct {
	Redis   string   // redis.addrs: the one Redis address
	Slots   int      // redis.slots
	Kafka   []string // the brokers of ingest.kafka and events.kafka
	Replica string   // cluster.replica_id
	Group   string   // ingest.kafka.group_id; default "hb-<Replica>", a group of its own
}

// YAML is the config file: the servers' sections, then sections (further top-level YAML such as types,
// detection, correlation). A restarted replica waits out its predecessor's group session
// (session_timeout) before it reads; 6s keeps that short.
func (c KafkaReplicaConfig) YAML(sections string) string {
	brokers := QuoteAll(c.Kafka)
	group := cmp.Or(c.Group, "hb-"+c.Replica)
	return fmt.Sprintf(`
redis: {addrs: [%q], slots: %d}
ingest:
  mqtt: {enabled: false}
  kafka: {enabled: true, brokers: [%s], topics: [%q], group_id: %q, session_timeout: 6s}
events:
  kafka: {brokers: [%s], topic: %q, deadletter_topic: %q}
cluster: {replica_id: %q}
log: {level: info, format: json}
`, c.Redis, c.Slots, brokers, SignalsTopic, group, brokers, EventsTopic, DeadLetterTopic, c.Replica) + sections
}

// QuoteAll is ss as the items of a YAML flow sequence, for config files written by tests.
func QuoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}
