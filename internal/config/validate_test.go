package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An API reachable from other hosts must not run without a token: it can silence the whole fleet.
func TestHTTPListenNeedsTokenBeyondLoopback(t *testing.T) {
	open := []string{"0.0.0.0:8080", ":8080", "[::]:8080", "10.1.2.3:8080", "heartbeatd.example:8080", "[fe80::1]:8080"}
	for _, listen := range open {
		_, err := Parse([]byte(minimal+"http: {listen: '"+listen+"'}"), noEnv)
		require.Error(t, err, listen)
		assert.Contains(t, err.Error(), "config: http.listen: ")
		assert.Contains(t, err.Error(), "set http.token, http.token_file (HEARTBEATD_HTTP_TOKEN_FILE) or http.tokens", listen)

		cfg, err := Parse([]byte(minimal+"http: {listen: '"+listen+"'}"), envMap(map[string]string{"HEARTBEATD_HTTP_TOKEN": "a-long-random-token"}))
		require.NoError(t, err, "%s with a token", listen)
		assert.Equal(t, listen, cfg.HTTP.Listen)
	}
	for _, listen := range []string{"127.0.0.1:8080", "127.0.0.53:9", "[::1]:8080", "localhost:8080", "LOCALHOST:1"} {
		_, err := Parse([]byte(minimal+"http: {listen: '"+listen+"'}"), noEnv)
		require.NoError(t, err, listen)
	}

	// A token file that cannot be read leaves no token: both problems are named.
	parseFails(t, minimal+"http: {listen: '0.0.0.0:8080', token_file: /nonexistent/token}", noEnv,
		"config: http.token_file: open /nonexistent/token", "no API token is set")

	for _, bad := range []string{" x", "x ", "a\x01b"} {
		_, err := Parse([]byte(minimal), envMap(map[string]string{"HEARTBEATD_HTTP_TOKEN": bad}))
		require.Error(t, err, "%q", bad)
		assert.Contains(t, err.Error(), "config: http.token: must not start or end with spaces")
	}
}

func TestAddressErrorsHideCredentials(t *testing.T) {
	err := parseFails(t, minimal+"redis: {addrs: ['admin:hunter2@redis:6379']}\nevents: {kafka: {brokers: ['u:pw-77@k:9092']}}", noEnv,
		`config: redis.addrs[0]: "<redacted>@redis:6379": want host:port`, `config: events.kafka.brokers[0]: "<redacted>@k:9092": want host:port`)
	assert.NotContains(t, err.Error(), "hunter2")
	assert.NotContains(t, err.Error(), "pw-77")
}

func TestWarnings(t *testing.T) {
	cfg, err := Parse([]byte(minimal), noEnv)
	require.NoError(t, err)
	assert.Empty(t, cfg.Warnings(), "the defaults send no secret anywhere")

	cfg, err = Parse([]byte(minimal+`
redis: {password: r, tls: {enabled: true, insecure_skip_verify: true}}
ingest:
  mqtt: {brokers: ['tcp://u:url-pw@a:1883', 'ssl://b:8883']}
  kafka: {enabled: true, sasl: {mechanism: PLAIN, username: u, password: p}}
events: {kafka: {sasl: {mechanism: scram-sha-512, username: u, password: p}, tls: {enabled: false}}}
`), noEnv)
	require.NoError(t, err)
	got := map[string]string{}
	for _, w := range cfg.Warnings() {
		got[w.Key] = w.Message
	}
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	assert.ElementsMatch(t, []string{"redis.tls.insecure_skip_verify", "ingest.mqtt.brokers[0]", "ingest.kafka.sasl.mechanism",
		"events.kafka.sasl.mechanism"}, keys, "redis.password goes over TLS; the ssl:// broker is fine")
	assert.Contains(t, got["redis.tls.insecure_skip_verify"], "certificate is not checked")
	assert.Contains(t, got["ingest.mqtt.brokers[0]"], `"tcp://u:redacted@a:1883" is plaintext`)
	assert.NotContains(t, got["ingest.mqtt.brokers[0]"], "url-pw")
	assert.Contains(t, got["ingest.kafka.sasl.mechanism"], "ingest.kafka.tls.enabled is false): the password crosses the network in clear text")
	assert.Contains(t, got["events.kafka.sasl.mechanism"], "scram-sha-512 without TLS")

	cfg, err = Parse([]byte(minimal+`
redis: {password: r}
ingest:
  mqtt: {password: m, tls: {enabled: true, insecure_skip_verify: true}, brokers: ['mqtts://a:8883']}
  kafka: {enabled: false, sasl: {mechanism: plain, username: u, password: p}}
events: {kafka: {tls: {enabled: true, insecure_skip_verify: true}}}
`), noEnv)
	require.NoError(t, err)
	var msgs []string
	for _, w := range cfg.Warnings() {
		msgs = append(msgs, w.Key+": "+w.Message)
	}
	all := strings.Join(msgs, "\n")
	assert.Len(t, msgs, 3, all)
	assert.Contains(t, all, "redis.password: sent in clear text: redis.tls.enabled is false")
	assert.Contains(t, all, "ingest.mqtt.tls.insecure_skip_verify: true")
	assert.Contains(t, all, "events.kafka.tls.insecure_skip_verify: true")
	assert.NotContains(t, all, "ingest.kafka", "a source that is off sends nothing")

	cfg, err = Parse([]byte(minimal+"ingest: {mqtt: {password: m, brokers: ['ws://a:80']}}"), noEnv)
	require.NoError(t, err)
	require.Len(t, cfg.Warnings(), 1)
	assert.Equal(t, "ingest.mqtt.brokers[0]", cfg.Warnings()[0].Key)
}

// The image's default command runs compose.yaml on 0.0.0.0: without the token docker-compose.yml mounts
// it must refuse to start, naming what to set.
func TestComposeConfigNeedsItsSecrets(t *testing.T) {
	path := filepath.Join("..", "..", "configs", "compose.yaml")
	_, err := LoadEnv(path, noEnv)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `config: http.listen: "0.0.0.0:8080" accepts connections from other hosts, but no API token is set`)
	assert.Contains(t, err.Error(), "config: ingest.mqtt.password_file: open /run/secrets/mqtt-password")

	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef\n"), 0o600))
	cfg, err := LoadEnv(path, envMap(map[string]string{"HEARTBEATD_HTTP_TOKEN_FILE": secret, "HEARTBEATD_INGEST_MQTT_PASSWORD_FILE": secret}))
	require.NoError(t, err)
	assert.Equal(t, "heartbeatd", cfg.Ingest.MQTT.Username)
	assert.Equal(t, "0123456789abcdef0123456789abcdef", cfg.HTTP.Token)
}

// events.kafka.create_topics: a partial block keeps the other defaults; values Kafka could never accept
// are named, also with creation off, since they make the command shown for a missing topic.
func TestCreateTopics(t *testing.T) {
	cfg, err := Parse([]byte(minimal+"events: {kafka: {create_topics: {replication_factor: 1}}}"), noEnv)
	require.NoError(t, err)
	assert.Equal(t, CreateTopics{Enabled: true, Partitions: 12, ReplicationFactor: 1}, cfg.Events.Kafka.CreateTopics)

	parseFails(t, minimal+"events: {kafka: {create_topics: {enabled: false, partitions: 0, replication_factor: 40000}}}", noEnv,
		"config: events.kafka.create_topics.partitions: 0 must be between 1 and 10000",
		"config: events.kafka.create_topics.replication_factor: 40000 must be between 1 and 32767")
}

// A presence subscription names offline or online; a payload to match needs presence; offline_grace
// defaults to 10s and may not be negative.
func TestPresenceSubscriptions(t *testing.T) {
	cfg, err := Parse([]byte(minimal+`
ingest:
  mqtt:
    subscriptions:
      - topic: "devices/{device_id}/heartbeat"
      - {topic: "devices/{device_id}/status", presence: offline, payload: offline}
      - {topic: "$SYS/brokers/+/clients/{device_id}/connected", presence: online}
`), noEnv)
	require.NoError(t, err)
	assert.Equal(t, DefaultOfflineGrace, cfg.Ingest.OfflineGrace)
	assert.Equal(t, Subscription{Topic: "devices/{device_id}/status", Presence: PresenceOffline, Payload: "offline"}, cfg.Ingest.MQTT.Subscriptions[1])

	parseFails(t, minimal+`
ingest:
  offline_grace: -1s
  mqtt:
    subscriptions:
      - {topic: "devices/{device_id}/status", presence: gone}
      - {topic: "devices/{device_id}/heartbeat", payload: ok}
`, noEnv, `config: ingest.offline_grace:`, `config: ingest.mqtt.subscriptions[0].presence: "gone": want offline or online`,
		`config: ingest.mqtt.subscriptions[1].payload: only with presence`)
}

// check-config lists the presence subscriptions with the grace; a config without any shows nothing.
func TestPresenceTable(t *testing.T) {
	cfg, err := Parse([]byte(minimal+`
ingest:
  offline_grace: 3s
  mqtt:
    subscriptions:
      - topic: "devices/{device_id}/heartbeat"
      - {topic: "devices/{device_id}/status", presence: offline, payload: offline}
`), noEnv)
	require.NoError(t, err)
	assert.Equal(t, "presence: an offline message interrupts its device 3s after it unless it signals meanwhile\n"+
		"  offline: devices/{device_id}/status (payload \"offline\")\n", cfg.PresenceTable())
	cfg, err = Parse([]byte(minimal), noEnv)
	require.NoError(t, err)
	assert.Empty(t, cfg.PresenceTable())
}
