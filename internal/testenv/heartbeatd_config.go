package testenv

import (
	"fmt"
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
}

// YAML is the config file: the servers' sections, then sections (further top-level YAML such as types,
// detection, http, log, shutdown_timeout).
func (c HeartbeatdConfig) YAML(sections string) string {
	return fmt.Sprintf(`
redis: {addrs: [%q], slots: %d}
ingest:
  mqtt:
    brokers: [%q]
    client_id: %q
    subscriptions: [{topic: "devices/{device_id}/heartbeat"}]
events:
  kafka: {brokers: [%q]}
`, c.Redis, c.Slots, c.MQTT, c.ClientID, strings.Join(c.Kafka, ",")) + sections
}
