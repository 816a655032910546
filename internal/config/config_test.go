package config

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

const minimal = "types: {default: {}}\n"

func noEnv(string) (string, bool) { return "", false }

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// parseFails parses yml with env, which must fail with an error containing each of want; the error is
// returned for a test's further checks.
func parseFails(t *testing.T, yml string, env func(string) (string, bool), want ...string) error {
	t.Helper()
	_, err := Parse([]byte(yml), env)
	require.Error(t, err)
	for _, w := range want {
		assert.Contains(t, err.Error(), w)
	}
	return err
}

func dur(d time.Duration) *time.Duration { return &d }
func intp(n int) *int                    { return &n }

func TestDefaults(t *testing.T) {
	cfg, err := Parse([]byte(minimal), noEnv)
	require.NoError(t, err)
	want := Default()
	want.Types = map[string]TypePolicy{"default": {}}
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Fatalf("(-want +got)\n%s", diff)
	}
	assert.Equal(t, BuiltinPolicy, cfg.Policies().Default())
}

// The reference config documents the defaults: it must load, state exactly the built-in values, and
// mention every key.
func TestStrictDecode(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string // substrings of the error
	}{
		{"top level", minimal + "redsi: {}\n", []string{`line 2: unknown key "redsi" (did you mean "redis"?)`}},
		{"nested", minimal + "ingest:\n  mqtt:\n    qos_level: 1\n", []string{`line 4: unknown key "ingest.mqtt.qos_level"`}},
		{"dash for underscore", minimal + "detection:\n  max-idle-wait: 1s\n", []string{`unknown key "detection.max-idle-wait" (did you mean "max_idle_wait"?)`}},
		{"in a type", "types:\n  default:\n    timout: 1s\n", []string{`line 3: unknown key "types.default.timout" (did you mean "timeout"?)`}},
		{"in a list", minimal + "ingest:\n  mqtt:\n    subscriptions:\n      - topic: a/{device_id}\n        group: x\n", []string{`line 6: unknown key "ingest.mqtt.subscriptions[0].group"`}},
		{"all reported", minimal + "a: 1\nb: 2\n", []string{`unknown key "a"`, `unknown key "b"`}},
		{"duration without unit", "types:\n  default:\n    timeout: 60\n", []string{"line 3: cannot unmarshal", "needs a unit"}},
		{"wrong type", minimal + "redis:\n  slots: many\n", []string{"line 3: cannot unmarshal !!str `many` into int"}},
		{"duplicate key", minimal + "log: {level: info}\nlog: {level: debug}\n", []string{`"log" already defined`}},
		{"two documents", minimal + "---\nlog: {level: debug}\n", []string{"line 2: more than one YAML document"}},
		{"syntax", "types: [\n", []string{"config: yaml:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { parseFails(t, tt.yaml, noEnv, tt.want...) })
	}
}

func TestEmptyValueKeepsDefault(t *testing.T) {
	// A block whose keys are all commented out is null in YAML; it must not wipe the block's defaults.
	cfg, err := Parse([]byte(minimal+"redis:\n  tls:\n  # enabled: true\ndetection:\n"), noEnv)
	require.NoError(t, err)
	assert.Equal(t, Default().Redis, cfg.Redis)
	assert.Equal(t, Default().Detection, cfg.Detection)
}

func TestEnvOverrides(t *testing.T) {
	file := "types:\n  default: {}\n  temperature-sensor: {timeout: 10m}\n  gateway: {}\n"
	tests := []struct {
		name  string
		env   map[string]string
		check func(t *testing.T, c *Config)
	}{
		{"list", map[string]string{"HEARTBEATD_REDIS_ADDRS": "10.0.0.1:6379, 10.0.0.2:6379,"}, func(t *testing.T, c *Config) {
			assert.Equal(t, []string{"10.0.0.1:6379", "10.0.0.2:6379"}, c.Redis.Addrs)
		}},
		{"duration", map[string]string{"HEARTBEATD_DETECTION_MAX_IDLE_WAIT": "20ms"}, func(t *testing.T, c *Config) {
			assert.Equal(t, 20*time.Millisecond, c.Detection.MaxIdleWait)
		}},
		{"bool", map[string]string{"HEARTBEATD_INGEST_MQTT_ENABLED": "false", "HEARTBEATD_INGEST_KAFKA_ENABLED": "true"}, func(t *testing.T, c *Config) {
			assert.False(t, c.Ingest.MQTT.Enabled)
			assert.True(t, c.Ingest.Kafka.Enabled)
		}},
		{"int", map[string]string{"HEARTBEATD_DETECTION_BATCH": "512", "HEARTBEATD_HTTP_MAX_BODY_BYTES": "2048"}, func(t *testing.T, c *Config) {
			assert.Equal(t, 512, c.Detection.Batch)
			assert.Equal(t, int64(2048), c.HTTP.MaxBodyBytes)
		}},
		{"string", map[string]string{"HEARTBEATD_HTTP_TOKEN": "s3cret", "HEARTBEATD_EVENTS_KAFKA_SASL_MECHANISM": "plain",
			"HEARTBEATD_EVENTS_KAFKA_SASL_USERNAME": "u", "HEARTBEATD_EVENTS_KAFKA_SASL_PASSWORD": "p"}, func(t *testing.T, c *Config) {
			assert.Equal(t, "s3cret", c.HTTP.Token)
			assert.Equal(t, "plain", c.Events.Kafka.SASL.MechanismName)
		}},
		{"top-level key", map[string]string{"HEARTBEATD_SHUTDOWN_TIMEOUT": "3s"}, func(t *testing.T, c *Config) {
			assert.Equal(t, 3*time.Second, c.ShutdownTimeout)
		}},
		{"type field", map[string]string{"HEARTBEATD_TYPES_TEMPERATURE_SENSOR_TIMEOUT": "15m", "HEARTBEATD_TYPES_GATEWAY_MAX_REPEATS": "0",
			"HEARTBEATD_TYPES_DEFAULT_REPEAT_EVERY": "0s"}, func(t *testing.T, c *Config) {
			p := c.Policies()
			ts, _ := p.Lookup("temperature-sensor")
			gw, _ := p.Lookup("gateway")
			assert.Equal(t, 15*time.Minute, ts.Timeout)
			assert.Equal(t, Policy{Timeout: 60 * time.Second, RepeatEvery: 0, MaxRepeats: 0}, gw)
			assert.Equal(t, time.Duration(0), p.Default().RepeatEvery)
		}},
		{"unknown type is not created", map[string]string{"HEARTBEATD_TYPES_TRACKER_TIMEOUT": "1m"}, func(t *testing.T, c *Config) {
			assert.NotContains(t, c.Types, "tracker")
		}},
		{"list of blocks as YAML", map[string]string{"HEARTBEATD_INGEST_MQTT_SUBSCRIPTIONS": `[{topic: "x/{device_id}", shared_group: g}]`}, func(t *testing.T, c *Config) {
			assert.Equal(t, []Subscription{{Topic: "x/{device_id}", SharedGroup: "g"}}, c.Ingest.MQTT.Subscriptions)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(file), envMap(tt.env))
			require.NoError(t, err)
			tt.check(t, cfg)
		})
	}
}

func TestEnvErrors(t *testing.T) {
	tests := []struct {
		name string
		file string
		env  map[string]string
		want []string
	}{
		{"bad int and duration reported together", minimal,
			map[string]string{"HEARTBEATD_DETECTION_BATCH": "lots", "HEARTBEATD_DETECTION_LEASE": "30"},
			[]string{`config: HEARTBEATD_DETECTION_BATCH (detection.batch): "lots" is not an integer`,
				`config: HEARTBEATD_DETECTION_LEASE (detection.lease): "30" is not a duration`}},
		{"bad bool", minimal, map[string]string{"HEARTBEATD_INGEST_MQTT_ENABLED": "yes please"},
			[]string{`HEARTBEATD_INGEST_MQTT_ENABLED (ingest.mqtt.enabled): "yes please" is not a boolean`}},
		{"strict YAML list", minimal, map[string]string{"HEARTBEATD_INGEST_MQTT_SUBSCRIPTIONS": `[{topik: x}]`},
			[]string{"HEARTBEATD_INGEST_MQTT_SUBSCRIPTIONS (ingest.mqtt.subscriptions): want a YAML list", "topik"}},
		{"ambiguous type name", "types: {default: {}, a-b: {}, a_b: {}}\n", map[string]string{"HEARTBEATD_TYPES_A_B_TIMEOUT": "1s"},
			[]string{"HEARTBEATD_TYPES_A_B_*: ambiguous: types.a-b, types.a_b"}},
		{"validation still runs", minimal, map[string]string{"HEARTBEATD_REDIS_SLOTS": "48"},
			[]string{"config: redis.slots: 48 is not a power of two"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { parseFails(t, tt.file, envMap(tt.env), tt.want...) })
	}
	// An ambiguity no variable targets is harmless.
	_, err := Parse([]byte("types: {default: {}, a-b: {}, a_b: {}}\n"), noEnv)
	require.NoError(t, err)
}

func TestEnvName(t *testing.T) {
	assert.Equal(t, "HEARTBEATD_REDIS_ADDRS", EnvName("redis.addrs"))
	assert.Equal(t, "HEARTBEATD_TYPES_TEMPERATURE_SENSOR_TIMEOUT", EnvName("types.temperature-sensor.timeout"))
}

func TestValidation(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string // every line must be in the error
	}{
		{"slots not a power of two", minimal + "redis: {slots: 48}", []string{"config: redis.slots: 48 is not a power of two"}},
		{"slots too many", minimal + "redis: {slots: 32768}", []string{"config: redis.slots: 32768 must be between 1 and 16384"}},
		{"slots zero", minimal + "redis: {slots: 0}", []string{"config: redis.slots: 0 must be between 1 and 16384"}},
		{"no addrs", minimal + "redis: {addrs: []}", []string{"config: redis.addrs: required"}},
		{"bad addr", minimal + "redis: {addrs: [localhost]}", []string{`config: redis.addrs[0]: "localhost": want host:port`}},
		{"db with cluster", minimal + "redis: {addrs: [a:1, b:1], db: 2}", []string{"config: redis.db: must be 0 with Redis Cluster"}},
		{"key prefix braces", minimal + "redis: {key_prefix: 'h{b}'}", []string{`config: redis.key_prefix: "h{b}" must not contain braces`}},
		{"pool size", minimal + "redis: {pool_size: -1}", []string{"config: redis.pool_size: must not be negative"}},
		{"no default", "types: {gateway: {timeout: 1s}}", []string{"config: types.default: required"}},
		{"no types", "", []string{"config: types.default: required"}},
		{"zero timeout", "types: {default: {}, gateway: {timeout: 0s}}", []string{"config: types.gateway.timeout: must be > 0"}},
		{"negative repeat", "types: {default: {repeat_every: -1s}}", []string{"config: types.default.repeat_every: -1s must not be negative"}},
		{"negative max_repeats", "types: {default: {max_repeats: -1}}", []string{"config: types.default.max_repeats: must not be negative"}},
		{"control char in type", "types: {default: {}, \"a\\tb\": {}}", []string{`config: types["a\tb"]: a type name must not contain control characters`}},
		{"override in type", "types: {default: {}, \"meter\\u202E\": {}}", []string{`config: types["meter\u202e"]: a type name must not contain invisible format characters (U+202E`}},
		{"zero-width space in type", "types: {default: {}, \"me\\u200Bter\": {}}", []string{`config: types["me\u200bter"]: a type name must not contain invisible format characters (U+200B`}},
		{"coalesce vs timeout", "types: {default: {}, gateway: {timeout: 30s}}\ningest: {coalesce: 40s}",
			[]string{"config: ingest.coalesce: 40s must be shorter than every timeout (types.gateway.timeout is 30s)"}},
		{"coalesce vs inherited timeout", "types: {default: {timeout: 20s}, gateway: {}}\ningest: {coalesce: 20s}",
			[]string{"config: ingest.coalesce: 20s must be shorter than every timeout (types.default.timeout is 20s)"}},
		{"negative coalesce", minimal + "ingest: {coalesce: -1s}", []string{"config: ingest.coalesce: -1s must not be negative"}},
		{"ingest batch", minimal + "ingest: {batch: 0, max_in_flight: 0, linger: -1ms}",
			[]string{"config: ingest.batch: must be > 0", "config: ingest.max_in_flight: must be > 0", "config: ingest.linger: -1ms must not be negative"}},
		{"max idle wait", minimal + "detection: {max_idle_wait: 0s}", []string{"config: detection.max_idle_wait: must be > 0"}},
		{"detection", minimal + "detection: {batch: 0, lease: 0s, max_publish_attempts: 0, lag_threshold: 0s, grace_after_outage: -1s}",
			[]string{"config: detection.batch: must be > 0", "config: detection.lease: must be > 0",
				"config: detection.max_publish_attempts: must be > 0", "config: detection.lag_threshold: must be > 0",
				"config: detection.grace_after_outage: -1s must not be negative"}},
		{"blind windows", minimal + "detection: {stall: 0s, max_hold_back: 0s, max_clock_offset: -1ms}\ningest: {max_lag: 0s}",
			[]string{"config: detection.stall: must be > 0", "config: detection.max_hold_back: must be > 0",
				"config: detection.max_clock_offset: must be > 0", "config: ingest.max_lag: must be > 0"}},
		{"stall below the tick", minimal + "detection: {stall: 100ms}",
			[]string{"config: detection.stall: 100ms must be at least 300ms (the stall check ticks every 100ms)"}},
		{"lag alias disagrees", minimal + "detection: {lag_threshold: 1s}\ningest: {max_lag: 3s}",
			[]string{"config: detection.lag_threshold: deprecated name of ingest.max_lag, and the two disagree (1s, 3s)"}},
		{"qos", minimal + "ingest: {mqtt: {qos: 3}}", []string{"config: ingest.mqtt.qos: must be 0, 1 or 2"}},
		{"log format", minimal + "log: {format: text}", []string{"config: log.format: must be json or console"}},
		{"log level", minimal + "log: {level: verbose}", []string{"config: log.level: must be debug, info, warn or error"}},
		{"events topic", minimal + "events: {kafka: {topic: ''}}", []string{"config: events.kafka.topic: required"}},
		{"deadletter same as events", minimal + "events: {kafka: {deadletter_topic: heartbeat.events}}",
			[]string{"config: events.kafka.deadletter_topic: must differ from events.kafka.topic"}},
		{"sasl mechanism", minimal + "events: {kafka: {sasl: {mechanism: gssapi}}}",
			[]string{`config: events.kafka.sasl.mechanism: "gssapi" must be "", plain, scram-sha-256 or scram-sha-512`}},
		{"sasl credentials", minimal + "ingest: {kafka: {sasl: {mechanism: SCRAM-SHA-512}}}",
			[]string{"config: ingest.kafka.sasl.username: required with mechanism scram-sha-512",
				"config: ingest.kafka.sasl.password: required with mechanism scram-sha-512"}},
		{"kafka ingest", minimal + "ingest: {kafka: {enabled: true, brokers: [], topics: [], group_id: ''}}",
			[]string{"config: ingest.kafka.brokers: required", "config: ingest.kafka.topics: required when enabled", "config: ingest.kafka.group_id: required"}},
		{"history group shared", minimal + "history: {group_id: heartbeatd-notify}",
			[]string{`config: history.group_id: "heartbeatd-notify" is ingest.kafka.group_id or notify.group_id too: the history needs a group of its own`}},
		{"history group empty", minimal + "history: {group_id: ''}", []string{"config: history.group_id: required"}},
		{"mqtt no device_id", minimal + "ingest: {mqtt: {subscriptions: [{topic: 'devices/+/hb'}]}}",
			[]string{`config: ingest.mqtt.subscriptions[0].topic: "devices/+/hb" must contain {device_id} exactly once`}},
		{"mqtt device_id twice", minimal + "ingest: {mqtt: {subscriptions: [{topic: '{device_id}/{device_id}'}]}}",
			[]string{"must contain {device_id} exactly once"}},
		{"mqtt placeholder not a level", minimal + "ingest: {mqtt: {subscriptions: [{topic: 'dev-{device_id}/hb'}]}}",
			[]string{`config: ingest.mqtt.subscriptions[0].topic: "dev-{device_id}/hb": level "dev-{device_id}": a placeholder must be a whole level`}},
		{"mqtt type twice", minimal + "ingest: {mqtt: {subscriptions: [{topic: '{device_type}/{device_type}/{device_id}'}]}}",
			[]string{"must contain {device_type} at most once"}},
		{"mqtt # not last", minimal + "ingest: {mqtt: {subscriptions: [{topic: '#/{device_id}'}]}}", []string{"# must be the last level"}},
		{"mqtt $share", minimal + "ingest: {mqtt: {subscriptions: [{topic: '$share/g/{device_id}'}]}}", []string{"use shared_group instead"}},
		{"mqtt shared group", minimal + "ingest: {mqtt: {subscriptions: [{topic: '{device_id}', shared_group: 'a/b'}]}}",
			[]string{`config: ingest.mqtt.subscriptions[0].shared_group: "a/b" must not contain / + #`}},
		{"mqtt no subscriptions", minimal + "ingest: {mqtt: {subscriptions: []}}", []string{"config: ingest.mqtt.subscriptions: required when enabled"}},
		{"mqtt broker scheme", minimal + "ingest: {mqtt: {brokers: ['http://x:1']}}", []string{`config: ingest.mqtt.brokers[0]: "http://x:1": scheme must be`}},
		{"mqtt tls with plaintext broker", minimal + "ingest: {mqtt: {tls: {enabled: true}}}",
			[]string{`config: ingest.mqtt.brokers[0]: "tcp://127.0.0.1:1883" is plaintext but ingest.mqtt.tls.enabled is true`}},
		{"mqtt broker password not echoed", minimal + "ingest: {mqtt: {brokers: ['http://u:hunter2@x:1']}}", []string{"u:redacted@x:1"}},
		{"tls options while off", minimal + "redis: {tls: {ca_file: /etc/ca.pem}}",
			[]string{"config: redis.tls.enabled: false, but the block sets files or options"}},
		{"tls missing file", minimal + "events: {kafka: {tls: {enabled: true, ca_file: /nonexistent/ca.pem}}}",
			[]string{"config: events.kafka.tls: ca_file: open /nonexistent/ca.pem"}},
		{"tls half pair", minimal + "redis: {tls: {enabled: true, cert_file: c.pem}}",
			[]string{"config: redis.tls: cert_file without key_file"}},
		{"cluster lease", minimal + "cluster: {replica_heartbeat: 2s, slot_lease: 2s}",
			[]string{"config: cluster.slot_lease: 2s must be longer than cluster.replica_heartbeat (2s)"}},
		{"cluster zero", minimal + "cluster: {replica_heartbeat: 0s}", []string{"config: cluster.replica_heartbeat: must be > 0"}},
		{"http", minimal + "http: {listen: '8080', max_body_bytes: 0}",
			[]string{`config: http.listen: "8080": want host:port`, "config: http.max_body_bytes: must be > 0"}},
		{"shutdown", minimal + "shutdown_timeout: 0s", []string{"config: shutdown_timeout: must be > 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := parseFails(t, tt.yaml, noEnv, tt.want...)
			if tt.name == "mqtt broker password not echoed" {
				assert.NotContains(t, err.Error(), "hunter2")
			}
		})
	}
}

// detection.lag_threshold still sets the lag bound under its new name, ingest.max_lag, and says so.
func TestDeprecatedLagThreshold(t *testing.T) {
	cfg, err := Parse([]byte(minimal+"detection: {lag_threshold: 1s}"), noEnv)
	require.NoError(t, err)
	assert.Equal(t, time.Second, cfg.Ingest.MaxLag)
	require.Len(t, cfg.Deprecations(), 1)
	assert.Equal(t, "detection.lag_threshold", cfg.Deprecations()[0].Key)
	assert.Contains(t, cfg.Deprecations()[0].Message, "write ingest.max_lag instead")

	cfg, err = Parse([]byte(minimal+"detection: {lag_threshold: 5s}\ningest: {max_lag: 5s}"), noEnv)
	require.NoError(t, err, "both written, agreeing")
	assert.Equal(t, 5*time.Second, cfg.Ingest.MaxLag)

	cfg, err = Parse([]byte(minimal), envMap(map[string]string{"HEARTBEATD_DETECTION_LAG_THRESHOLD": "750ms"}))
	require.NoError(t, err)
	assert.Equal(t, 750*time.Millisecond, cfg.Ingest.MaxLag, "the old variable too")

	cfg, err = Parse([]byte(minimal), noEnv)
	require.NoError(t, err)
	assert.Empty(t, cfg.Deprecations())
	assert.Equal(t, DefaultMaxLag, cfg.Ingest.MaxLag)
}

func TestValidationReportsEverything(t *testing.T) {
	_, err := Parse([]byte("types: {gateway: {timeout: 0s}}\nredis: {slots: 48}\nlog: {format: text}\ningest: {mqtt: {qos: 5}}\n"), noEnv)
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	sort.Strings(lines)
	assert.Equal(t, []string{
		"config: ingest.mqtt.qos: must be 0, 1 or 2",
		"config: log.format: must be json or console",
		"config: redis.slots: 48 is not a power of two",
		"config: types.default: required",
		"config: types.gateway.timeout: must be > 0",
	}, lines)
}

func TestPolicies(t *testing.T) {
	cfg, err := Parse([]byte(`
types:
  default:
    timeout: 60s
    repeat_every: 5m
  gateway:
    timeout: 30s
    repeat_every: 1m
  temperature-sensor:
    timeout: 10m
  tracker:
    max_repeats: 0        # explicit 0 (unlimited) must not be taken for unset
  silent-ok:
    repeat_every: 0s      # never repeat
`), noEnv)
	require.NoError(t, err)
	p := cfg.Policies()

	def := Policy{Timeout: 60 * time.Second, RepeatEvery: 5 * time.Minute, MaxRepeats: 12} // max_repeats: built-in
	tests := []struct {
		name  string
		want  Policy
		known bool
	}{
		{"default", def, true},
		{"gateway", Policy{Timeout: 30 * time.Second, RepeatEvery: time.Minute, MaxRepeats: 12}, true},
		{"temperature-sensor", Policy{Timeout: 10 * time.Minute, RepeatEvery: 5 * time.Minute, MaxRepeats: 12}, true},
		{"tracker", Policy{Timeout: 60 * time.Second, RepeatEvery: 5 * time.Minute}, true},
		{"silent-ok", Policy{Timeout: 60 * time.Second, MaxRepeats: 12}, true},
		{"unknown", def, false},
		{"", def, false},
	}
	for _, tt := range tests {
		got, known := p.Lookup(tt.name)
		assert.Equal(t, tt.want, got, tt.name)
		assert.Equal(t, tt.known, known, tt.name)
	}
	assert.Equal(t, def, p.Default())
	assert.Equal(t, []string{"default", "gateway", "silent-ok", "temperature-sensor", "tracker"}, p.Names())
	assert.Equal(t, 10*time.Minute, p.LongestTimeout())
	assert.Equal(t, 15*time.Minute, p.LongestCycle())

	names := p.Names()
	names[0] = "mutated"
	assert.Equal(t, "default", p.Names()[0], "Names must return a copy")
}

// TestPolicyWithOwnTimeout: a registered device's own timeout replaces its type's and its schedule; its
// type's warn_after stays only while it is shorter.
func TestPolicyWithOwnTimeout(t *testing.T) {
	cfg, err := Parse([]byte("types: {default: {}, gateway: {timeout: 30s, repeat_every: 1m, warn_after: 20s}}\n"), noEnv)
	require.NoError(t, err)
	gw, known := cfg.Policies().Lookup("gateway")
	require.True(t, known)
	assert.Equal(t, gw, gw.WithOwnTimeout(0), "no own timeout: the type's policy")
	own := gw.WithOwnTimeout(45 * time.Second)
	assert.Equal(t, Policy{Timeout: 45 * time.Second, RepeatEvery: time.Minute, MaxRepeats: 12, WarnAfter: 20 * time.Second}, own)
	assert.Zero(t, gw.WithOwnTimeout(15*time.Second).WarnAfter, "a warning no earlier than the own timeout says nothing")
	_, known = cfg.Policies().Lookup("gateway@45s")
	assert.False(t, known, "only configured names are known")
}

func TestPolicyTable(t *testing.T) {
	cfg := &Config{Types: map[string]TypePolicy{
		"default":            {Timeout: dur(60 * time.Second), RepeatEvery: dur(5 * time.Minute)},
		"gateway":            {Timeout: dur(30 * time.Second), RepeatEvery: dur(0), MaxRepeats: intp(0)},
		"temperature-sensor": {Timeout: dur(90 * time.Minute), Flapping: &Flapping{Count: 5, Window: 10 * time.Minute}},
	}}
	want := `TYPE                TIMEOUT  REPEAT_EVERY  MAX_REPEATS    FLAPPING
default             1m       5m            12 **          off
gateway             30s      0 (never)     0 (unlimited)  off
temperature-sensor  1h30m    5m *          12 **          5 in 10m

*  inherited from types.default
** built-in default (types.default does not set it)
`
	if diff := cmp.Diff(want, cfg.PolicyTable()); diff != "" {
		t.Fatalf("(-want +got)\n%s", diff)
	}
}

func TestSecretFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	redisPw := write("redis", "r-secret\n")
	token := write("token", "t-secret\r\n")
	sasl := write("sasl", "s-secret") // no newline
	multi := write("multi", "line1\nline2\n\n")

	cfg, err := Parse([]byte(minimal+`
redis: {password_file: `+redisPw+`}
http: {token_file: `+token+`}
events: {kafka: {sasl: {mechanism: plain, username: u, password_file: `+sasl+`}}}
ingest: {mqtt: {password_file: `+multi+`}}
`), noEnv)
	require.NoError(t, err)
	assert.Equal(t, "r-secret", cfg.Redis.Password)
	assert.Equal(t, "t-secret", cfg.HTTP.Token)
	assert.Equal(t, "s-secret", cfg.Events.Kafka.SASL.Password)
	assert.Equal(t, "line1\nline2\n", cfg.Ingest.MQTT.Password, "only one trailing newline is dropped")

	// From the environment too.
	cfg, err = Parse([]byte(minimal), envMap(map[string]string{"HEARTBEATD_HTTP_TOKEN_FILE": token}))
	require.NoError(t, err)
	assert.Equal(t, "t-secret", cfg.HTTP.Token)

	tests := []struct {
		name, yaml string
		env        map[string]string
		want       string
	}{
		{"both set", "redis: {password: x, password_file: " + redisPw + "}", nil, "config: redis.password and redis.password_file: set only one"},
		{"both set via env", "http: {token: x}", map[string]string{"HEARTBEATD_HTTP_TOKEN_FILE": token}, "config: http.token and http.token_file: set only one"},
		{"missing file", "ingest: {kafka: {sasl: {password_file: /nonexistent/pw}}}", nil, "config: ingest.kafka.sasl.password_file: open /nonexistent/pw"},
		{"empty file", "redis: {password_file: " + write("empty", "\n") + "}", nil, "config: redis.password_file: " + filepath.Join(dir, "empty") + " is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { parseFails(t, minimal+tt.yaml, envMap(tt.env), tt.want) })
	}
}

func TestRedacted(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	require.NoError(t, os.WriteFile(pwFile, []byte("from-a-file-77\n"), 0o600))
	secrets := []string{"redis-pw-11", "mqtt-pw-22", "kafka-in-pw-33", "http-token-55", "url-pw-66", "from-a-file-77"}
	cfg, err := Parse([]byte(minimal+`
redis: {password: redis-pw-11}
ingest:
  mqtt: {password: mqtt-pw-22, brokers: ["tcp://user:url-pw-66@broker:1883"]}
  kafka: {sasl: {mechanism: scram-sha-256, username: u, password: kafka-in-pw-33}}
events: {kafka: {sasl: {mechanism: plain, username: u, password_file: `+pwFile+`}}}
`), envMap(map[string]string{"HEARTBEATD_HTTP_TOKEN": "http-token-55"}))
	require.NoError(t, err)
	require.Equal(t, "from-a-file-77", cfg.Events.Kafka.SASL.Password)

	r := cfg.Redacted()
	out, err := yaml.Marshal(r)
	require.NoError(t, err)
	for _, rendered := range []string{string(out), cfg.String(), cfg.PolicyTable()} {
		for _, s := range secrets {
			assert.NotContains(t, rendered, s)
		}
	}
	assert.Equal(t, Redaction, r.Redis.Password)
	assert.Equal(t, Redaction, r.HTTP.Token)
	assert.Equal(t, "", r.Ingest.MQTT.Username, "unset secrets stay empty so a reader sees they are unset")
	assert.Equal(t, "", r.Redis.Username)
	assert.Equal(t, pwFile, r.Events.Kafka.SASL.PasswordFile, "file paths are not secrets")
	assert.Equal(t, "tcp://user:redacted@broker:1883", r.Ingest.MQTT.Brokers[0])
	assert.Equal(t, "redis-pw-11", cfg.Redis.Password, "the original keeps its secrets")
	assert.Equal(t, "tcp://user:url-pw-66@broker:1883", cfg.Ingest.MQTT.Brokers[0])

	// Every string field called password or token anywhere in Config is covered.
	var unredacted []string
	secretWalk(reflect.ValueOf(r).Elem(), "", func(v reflect.Value, path string, _ reflect.Value) {
		if v.String() != "" && v.String() != Redaction {
			unredacted = append(unredacted, path)
		}
	})
	assert.Empty(t, unredacted)
}

func TestClone(t *testing.T) {
	cfg, err := Parse([]byte("types: {default: {timeout: 1m}, gw: {max_repeats: 3}}\n"), noEnv)
	require.NoError(t, err)
	c := cfg.Clone()
	require.Empty(t, cmp.Diff(cfg, c))
	c.Redis.Addrs[0] = "changed:1"
	c.Ingest.MQTT.Subscriptions[0].Topic = "changed"
	*c.Types["default"].Timeout = time.Hour
	c.Types["new"] = TypePolicy{}
	assert.Equal(t, "127.0.0.1:6379", cfg.Redis.Addrs[0])
	assert.Equal(t, "devices/{device_id}/heartbeat", cfg.Ingest.MQTT.Subscriptions[0].Topic)
	assert.Equal(t, time.Minute, *cfg.Types["default"].Timeout)
	assert.NotContains(t, cfg.Types, "new")
}

func TestChangedKeys(t *testing.T) {
	a := Default()
	b := Default()
	b.Redis.Addrs = []string{"x:1"}
	b.HTTP.Token = "secret"
	b.Types = map[string]TypePolicy{"default": {}}
	assert.Equal(t, []string{"redis.addrs", "types", "http.token"}, ChangedKeys(a, b))
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 1500 * time.Millisecond: "1.5s", 5 * time.Minute: "5m", 90 * time.Minute: "1h30m",
		2 * time.Hour: "2h", time.Hour + time.Second: "1h0m1s", 50 * time.Millisecond: "50ms",
	} {
		assert.Equal(t, want, FormatDuration(d))
	}
}

func TestAnchorsAndMerges(t *testing.T) {
	cfg, err := Parse([]byte(`
types:
  default: {timeout: 60s}
  sensor: &sensor {timeout: 10m, max_repeats: 2}
  outdoor-sensor:
    <<: *sensor
    timeout: 20m
ingest:
  mqtt:
    subscriptions:
      - &sub {topic: "devices/{device_id}/hb"}
`), noEnv)
	require.NoError(t, err)
	p, _ := cfg.Policies().Lookup("outdoor-sensor")
	assert.Equal(t, Policy{Timeout: 20 * time.Minute, RepeatEvery: 5 * time.Minute, MaxRepeats: 2}, p)

	_, err = Parse([]byte("types:\n  default: {}\n  a: &a {timeout: 1s}\n  b:\n    <<: *a\n    timout: 2s\n"), noEnv)
	require.ErrorContains(t, err, `line 6: unknown key "types.b.timout"`)
}

func BenchmarkPoliciesLookup(b *testing.B) {
	cfg, err := Parse([]byte("types: {default: {}, gateway: {timeout: 30s}, temperature-sensor: {timeout: 10m}}"), nil)
	require.NoError(b, err)
	p := cfg.Policies()
	for _, name := range []string{"gateway", "unknown"} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = p.Lookup(name)
			}
		})
	}
}

// A configured URL goes into errors and logs redacted: a password, a user standing alone (a token, as in
// https://<token>@host), every query value and a fragment; what tells the URL apart (scheme, host, path,
// query keys) stays.
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://am.example:9093":                         "https://am.example:9093",
		"https://am.example:9093/prefix/":                 "https://am.example:9093/prefix/",
		"tcp://user:pw@broker:1883":                       "tcp://user:redacted@broker:1883",
		"https://s3cret-token@am.example:9093":            "https://redacted@am.example:9093",
		"https://am.example:9093/?api_key=s3cret":         "https://am.example:9093/?api_key=redacted",
		"https://am.example/?a=1&api_key=s3cret&flag":     "https://am.example/?a=redacted&api_key=redacted&redacted",
		"https://am.example/?":                            "https://am.example/",
		"https://am.example/#token=s3cret":                "https://am.example/#redacted",
		"https://u:pw@am.example/p?k=v#f":                 "https://u:redacted@am.example/p?k=redacted#redacted",
		"https://am.example:9093/%zz?api_key=s3cret":      Redaction,
		"https://u:pw@am.example:bad":                     Redaction,
		"not a url but harmless":                          "not a url but harmless",
		"https://am.example/?api_key=s3cret%26more=x%3Dy": "https://am.example/?api_key=redacted",
	} {
		assert.Equal(t, want, RedactURL(in), in)
	}
	cfg := &Config{}
	cfg.Outputs.Alertmanager.URLs = []string{"https://am.example/?api_key=s3cret"}
	assert.NotContains(t, cfg.String(), "s3cret")
}
