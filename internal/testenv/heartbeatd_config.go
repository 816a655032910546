package testenv

import (
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
%s`, c.Redis, c.Slots, c.MQTT, c.ClientID, strings.Join(c.Kafka, ","), c.outputs()) + sections
}

// outputs is the outputs section, when an output is on.
func (c HeartbeatdConfig) outputs() string {
	if len(c.Alertmanager) == 0 {
		return ""
	}
	urls := make([]string, len(c.Alertmanager))
	for i, u := range c.Alertmanager {
		urls[i] = strconv.Quote(u)
	}
	return "outputs:\n  alertmanager: {urls: [" + strings.Join(urls, ", ") + "]}\n"
}
