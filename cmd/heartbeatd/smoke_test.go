package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// smokeTypes are the types the smoke config starts with: gateways time out after 1s.
const smokeTypes = `
types:
  default: {timeout: 1s, repeat_every: 0s}
  gateway: {timeout: 1s}
`

// smoke is one heartbeatd binary on real redis-server, mosquitto and kfake, with an MQTT device client.
type smoke struct {
	redis  *testenv.Redis
	broker *testenv.Mosquitto
	kafka  *testenv.Kafka
	hb     *testenv.Heartbeatd
	device mqtt.Client
	// clientID is ingest.mqtt.client_id; "" derives it from the host name.
	clientID string
}

func startSmoke(t *testing.T) *smoke { return startSmokeAs(t, "smoke") }

// startSmokeAs is startSmoke with heartbeatd's MQTT client id set to clientID.
func startSmokeAs(t *testing.T, clientID string) *smoke {
	t.Helper()
	s := &smoke{redis: testenv.StartRedis(t), broker: testenv.StartMosquitto(t),
		kafka: testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{"heartbeat.events", "heartbeat.deadletter"}}), clientID: clientID}
	s.hb = testenv.StartHeartbeatd(t, testenv.HeartbeatdOptions{Config: s.config(smokeTypes)})
	s.device = s.broker.Connect(t, mqtt.NewClientOptions().SetClientID("smoke-device"))
	s.awaitReady(t)
	return s
}

// config is a config for the real binary on the smoke's servers with the given types block.
func (s *smoke) config(types string) string {
	servers := testenv.HeartbeatdConfig{Redis: s.redis.Addr, Slots: 8, MQTT: s.broker.Addr, ClientID: s.clientID, Kafka: s.kafka.Addrs}
	return servers.YAML(types + `
detection: {grace_after_outage: 100ms}
shutdown_timeout: 5s
log: {level: debug, format: console}
`)
}

// awaitReady waits for /readyz 200: only then is heartbeatd subscribed, so a signal published now counts.
func (s *smoke) awaitReady(t *testing.T) {
	t.Helper()
	require.NoError(t, s.hb.AwaitReady(context.Background(), 20*time.Second), s.hb.LogTail())
}

func (s *smoke) publish(t *testing.T, device, payload string) {
	t.Helper()
	tok := s.device.Publish("devices/"+device+"/heartbeat", 1, false, payload)
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())
}

// awaitEvent reads the events topic from the start until device's event of kind shows up; every event
// before it must decode.
func (s *smoke) awaitEvent(t *testing.T, device string, kind event.Kind) event.Event {
	t.Helper()
	var found *event.Event
	decoded := 0
	s.kafka.ReadUntil(t, "heartbeat.events", 20*time.Second, func(recs []testenv.Record) bool {
		for ; found == nil && decoded < len(recs); decoded++ {
			ev, err := event.Decode(recs[decoded].Value)
			require.NoError(t, err)
			if ev.DeviceID == device && ev.Kind == kind {
				found = &ev
			}
		}
		return found != nil
	})
	if found == nil {
		t.Fatalf("no %s event for %s within 20s\n%s", kind, device, s.hb.LogTail())
	}
	return *found
}

// metric reads one unlabelled sample from /metrics; ok is false when it is missing.
func (s *smoke) metric(t *testing.T, name string) (value float64, ok bool) {
	t.Helper()
	value, ok, err := s.hb.Metric(name)
	if err != nil {
		return 0, false
	}
	return value, ok
}

// deviceView is the part of GET /v1/devices/{id} the tests look at.
type deviceView struct {
	DeviceType string     `json:"device_type"`
	Deadline   *time.Time `json:"deadline"`
}

// signalDeadline publishes a signal for a new device and returns the deadline heartbeatd recorded for it,
// relative to the moment just before the publish.
func (s *smoke) signalDeadline(t *testing.T, device, typ string) (time.Duration, deviceView) {
	t.Helper()
	before := time.Now()
	s.publish(t, device, fmt.Sprintf(`{"type":%q}`, typ))
	var v deviceView
	require.Eventually(t, func() bool {
		code, body, err := s.hb.Get("/v1/devices/" + device)
		if err != nil || code != 200 {
			return false
		}
		require.NoError(t, json.Unmarshal([]byte(body), &v))
		return v.Deadline != nil
	}, 10*time.Second, 20*time.Millisecond, s.hb.LogTail())
	return v.Deadline.Sub(before), v
}

func TestSmokeSignalToInterrupted(t *testing.T) {
	s := startSmoke(t)
	s.publish(t, "dev-1", `{"type":"gateway"}`)

	ev := s.awaitEvent(t, "dev-1", event.Interrupted)
	require.Equal(t, "gateway", ev.DeviceType)
	require.Equal(t, 0, ev.Repeat)
	require.GreaterOrEqual(t, ev.SilentForMs, int64(1000), "interrupted before the 1s timeout")

	took, clean := s.hb.Stop(t)
	require.True(t, clean, "SIGTERM must end heartbeatd with status 0\n%s", s.hb.LogTail())
	require.Less(t, took, 5*time.Second, "the config's shutdown_timeout (5s) bounds the stop after SIGTERM (docs/configuration.md)")
	t.Logf("SIGTERM to exit: %v", took)
}

// TestSmokeReload: SIGHUP applies edited types without a restart; a bad file is rejected and the running
// types stay.
func TestSmokeReload(t *testing.T) {
	s := startSmoke(t)
	reloadOK := func() float64 {
		v, ok := s.metric(t, "heartbeatd_config_last_reload_successful")
		require.True(t, ok, "heartbeatd_config_last_reload_successful missing from /metrics")
		return v
	}
	require.Equal(t, 1.0, reloadOK())
	until, _ := s.signalDeadline(t, "gw-before", "gateway")
	require.Less(t, until, time.Minute, "gateway timeout is 1s before any reload")

	// A bad file: the reload fails visibly, heartbeatd keeps running on the old types.
	require.NoError(t, os.WriteFile(s.hb.ConfigPath(), []byte(s.config(`
types:
  default: {timeout: 1s, repeat_every: 0s}
  gateway: {timeout: 0s}
`)), 0o600))
	s.hb.Signal(t, syscall.SIGHUP)
	require.Eventually(t, func() bool { return reloadOK() == 0 }, 10*time.Second, 20*time.Millisecond, s.hb.LogTail())
	require.Contains(t, s.hb.Log(), "types.gateway.timeout", "the rejection names the key")
	until, _ = s.signalDeadline(t, "gw-after-bad", "gateway")
	require.Less(t, until, time.Minute, "a rejected file must leave the running types in place")

	// A good file: a longer gateway timeout and a new type, both in effect from the next signal.
	require.NoError(t, os.WriteFile(s.hb.ConfigPath(), []byte(s.config(`
types:
  default: {timeout: 1s, repeat_every: 0s}
  gateway: {timeout: 1h}
  sensor: {timeout: 2h}
`)), 0o600))
	s.hb.Signal(t, syscall.SIGHUP)
	require.Eventually(t, func() bool { return reloadOK() == 1 }, 10*time.Second, 20*time.Millisecond, s.hb.LogTail())
	until, _ = s.signalDeadline(t, "gw-after-good", "gateway")
	require.Greater(t, until, 59*time.Minute, "the reloaded gateway timeout (1h) applies to the next signal")
	until, v := s.signalDeadline(t, "sensor-1", "sensor")
	require.Equal(t, "sensor", v.DeviceType)
	require.Greater(t, until, 119*time.Minute, "the new type's timeout (2h) applies")
	require.False(t, s.hb.Exited())
}

// TestSmokeReadyzFollowsRedis: /readyz says 503 (naming redis) while redis-server is down, 200 once it is
// back, and detection works again afterwards, although the restarted Redis lost everything.
func TestSmokeReadyzFollowsRedis(t *testing.T) {
	s := startSmoke(t)
	s.redis.Stop(t)
	var body string
	require.Eventually(t, func() bool {
		var code int
		code, body, _ = s.hb.Get("/readyz")
		return code == 503
	}, 10*time.Second, 20*time.Millisecond, s.hb.LogTail())
	require.Contains(t, body, "redis")

	s.redis.Start(t)
	s.awaitReady(t)
	s.publish(t, "dev-after-outage", `{"type":"gateway"}`)
	s.awaitEvent(t, "dev-after-outage", event.Interrupted)

	_, clean := s.hb.Stop(t)
	require.True(t, clean, s.hb.LogTail())
}

// TestSmokeStopWhileRedisDown: SIGTERM while Redis is down and signals wait unacknowledged still ends
// heartbeatd cleanly within 5s, and nothing is lost: the broker delivers the signals again to the next
// run, which turns them into events.
func TestSmokeStopWhileRedisDown(t *testing.T) {
	s := startSmoke(t)
	s.redis.Stop(t)
	devices := []string{"held-1", "held-2", "held-3"}
	for _, d := range devices {
		s.publish(t, d, `{"type":"gateway"}`)
	}
	require.Eventually(t, func() bool { return strings.Contains(s.hb.Log(), "deadline refresh failed") },
		10*time.Second, 20*time.Millisecond, s.hb.LogTail())

	took, clean := s.hb.Stop(t)
	t.Logf("SIGTERM with Redis down and signals held: %v", took)
	require.True(t, clean, "heartbeatd must exit with status 0 within its shutdown timeout\n%s", s.hb.LogTail())
	require.Less(t, took, 5*time.Second)
	// go-redis's own complaints go through the daemon's logger, not as bare "redis: …" lines that break
	// a JSON log apart.
	for _, line := range strings.Split(s.hb.Log(), "\n") {
		require.False(t, strings.HasPrefix(line, "redis: "), "unstructured log line: %s", line)
	}

	s.redis.Start(t)
	s.hb.Start(t)
	for _, d := range devices {
		s.awaitEvent(t, d, event.Interrupted)
	}
}

// TestSmokeOutageSeriesWithoutCorrelation: with correlation off, /metrics still shows
// heartbeatd_outages_open and the outage kinds of heartbeatd_events_total, at 0, so alerts and dashboards
// on them need no case for a missing series.
func TestSmokeOutageSeriesWithoutCorrelation(t *testing.T) {
	s := startSmoke(t)
	for _, sample := range []string{"heartbeatd_outages_open", `heartbeatd_events_total{kind="outage_started"}`,
		`heartbeatd_events_total{kind="outage_ended"}`} {
		v, ok := s.metric(t, sample)
		require.True(t, ok, "%s missing from /metrics", sample)
		require.Zero(t, v, sample)
	}
}
