package daemon

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

const presenceGrace = time.Second

// startPresenceDaemon runs the daemon on real servers with a one-minute timeout (no device falls
// silent during the test on its own), offline_grace 1s and a last will's topic read as presence.
func startPresenceDaemon(t *testing.T) (*actsDaemon, *testenv.Mosquitto) {
	t.Helper()
	rdb := testenv.StartRedis(t)
	broker := testenv.StartMosquitto(t)
	kafka := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{testenv.EventsTopic, testenv.DeadLetterTopic}})
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	path := filepath.Join(t.TempDir(), "heartbeatd.yaml")
	servers := testenv.HeartbeatdConfig{Redis: rdb.Addr, Slots: 4, MQTT: broker.Addr, ClientID: "presence", Kafka: kafka.Addrs,
		Ingest: "offline_grace: " + presenceGrace.String(),
		Subscriptions: []string{`{topic: "devices/{device_id}/status", presence: offline, payload: offline}`,
			`{topic: "devices/{device_id}/status", presence: online, payload: online}`}}
	require.NoError(t, os.WriteFile(path, []byte(servers.YAML(fmt.Sprintf(`
types:
  default: {timeout: 1m, repeat_every: 1m}
detection: {grace_after_outage: 100ms}
http: {listen: %q}
shutdown_timeout: %s
`, httpAddr, shutdownTimeout))), 0o600))
	startDaemon(t, path)
	d := &actsDaemon{t: t, base: "http://" + httpAddr, kafka: kafka,
		device: broker.Connect(t, mqtt.NewClientOptions().SetClientID("presence-devices"))}
	awaitReadyz(t, d.base)
	return d, broker
}

func (d *actsDaemon) publish(topic, payload string) {
	d.t.Helper()
	tok := d.device.Publish(topic, 1, false, payload)
	require.True(d.t, tok.WaitTimeout(10*time.Second))
	require.NoError(d.t, tok.Error())
}

// awaitOnline waits until the API shows each device online.
func (d *actsDaemon) awaitOnline(devices ...string) {
	d.t.Helper()
	for _, dev := range devices {
		require.Eventually(d.t, func() bool {
			code, out := callJSON(d.t, d.base, "GET", "/v1/devices/"+dev, "", "")
			return code == http.StatusOK && out["state"] == "online"
		}, 20*time.Second, 10*time.Millisecond, "%s online", dev)
	}
}

// awaitMetric waits until the sample (name{labels} as /metrics writes it) reaches at least n.
func (d *actsDaemon) awaitMetric(sample string, n float64) {
	d.t.Helper()
	require.Eventually(d.t, func() bool {
		resp, raw := request(d.t, d.base, "GET", "/metrics", "", "")
		if resp.StatusCode != http.StatusOK {
			return false
		}
		sc := bufio.NewScanner(bytes.NewReader(raw))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				return err == nil && f >= n
			}
		}
		return false
	}, 20*time.Second, 10*time.Millisecond, "%s reaches %v", sample, n)
}

// A real mosquitto last will and a reported failure end as events with their cause: the device whose
// client was killed is interrupted about offline_grace after its will (cause offline, last_seen its last
// heartbeat); the one that said online after its will has no incident; the one that reported a failure
// is interrupted at once with its reason and recovers at its next heartbeat.
func TestPresenceAndReportedFailureEvents(t *testing.T) {
	d, broker := startPresenceDaemon(t)
	for _, dev := range []string{"gone", "back", "pump"} {
		d.publish("devices/"+dev+"/heartbeat", "")
	}
	d.awaitOnline("gone", "back", "pump")
	heartbeat := time.Now()

	back := broker.ConnectWithWill(t, "back-conn", "devices/back/status", "offline")
	gone := broker.ConnectWithWill(t, "gone-conn", "devices/gone/status", "offline")
	back.Kill()
	d.awaitMetric(`heartbeatd_signals_marked_total{cause="offline",result="moved"}`, 1)
	d.publish("devices/back/status", "online") // back within the grace
	killed := time.Now()
	gone.Kill()
	d.publish("devices/pump/heartbeat", `{"status":"fail","reason":"valve stuck"}`)

	all := d.await("interrupted with causes", is(event.Interrupted, "gone"), is(event.Interrupted, "pump"))
	offline := only(t, all, event.Interrupted, "gone")
	require.Equal(t, event.CauseOffline, offline.Cause)
	require.WithinRange(t, offline.Deadline, killed.Truncate(time.Millisecond), killed.Add(presenceGrace+5*time.Second),
		"the deadline is the will's receipt + offline_grace, not the heartbeat + 1m")
	require.False(t, offline.Deadline.Before(killed.Add(presenceGrace).Truncate(time.Millisecond)), "not before the grace")
	require.True(t, offline.LastSeen.Before(heartbeat.Add(time.Millisecond)), "last_seen is the last heartbeat: %v", offline.LastSeen)
	reported := only(t, all, event.Interrupted, "pump")
	require.Equal(t, event.CauseReported, reported.Cause)
	require.Equal(t, "valve stuck", reported.Reason)
	// The device view says why too, not only the events.
	for dev, want := range map[string][2]string{"pump": {"reported", "valve stuck"}, "gone": {"offline", ""}} {
		code, view := callJSON(t, d.base, "GET", "/v1/devices/"+dev, "", "")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "interrupted", view["state"], dev)
		require.Equal(t, want[0], view["cause"], dev)
		reason, _ := view["reason"].(string)
		require.Equal(t, want[1], reason, dev)
	}

	d.publish("devices/pump/heartbeat", "")
	all = d.await("pump recovered", is(event.Recovered, "pump"))
	require.False(t, anyEvent(all, func(e event.Event) bool { return e.DeviceID == "back" }), "back said online: no incident, %v", all)
	d.awaitOnline("back")
}
