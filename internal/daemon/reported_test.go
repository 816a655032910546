package daemon

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// A device of a type with a one-minute timeout signals, and a second later reports a failure: over MQTT
// (a real mosquitto) and over Kafka it is interrupted at once with cause reported and its reason, as over
// HTTP, and the API shows the failure as its deadline and last_seen. The daemon has just started, so its
// MQTT connection's blind window still holds the type's devices back for their minute of grace: the
// failure, heard after that window, needs none.
func TestReportedFailureOverMQTTAndKafkaWhileHeldBack(t *testing.T) {
	rdb := testenv.StartRedis(t)
	broker := testenv.StartMosquitto(t)
	kafka := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{testenv.SignalsTopic, testenv.EventsTopic, testenv.DeadLetterTopic}})
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	path := filepath.Join(t.TempDir(), "heartbeatd.yaml")
	servers := testenv.HeartbeatdConfig{Redis: rdb.Addr, Slots: 4, MQTT: broker.Addr, ClientID: "reported", Kafka: kafka.Addrs,
		Ingest: fmt.Sprintf("kafka: {enabled: true, brokers: [%s], topics: [%q], group_id: hb-reported, session_timeout: 6s}",
			testenv.QuoteAll(kafka.Addrs), testenv.SignalsTopic)}
	require.NoError(t, os.WriteFile(path, []byte(servers.YAML(fmt.Sprintf(`
types:
  default: {timeout: 1m, repeat_every: 5m}
  pump: {timeout: 1m, repeat_every: 5m}
http: {listen: %q}
shutdown_timeout: %s
`, httpAddr, shutdownTimeout))), 0o600))
	startDaemon(t, path)
	d := &actsDaemon{t: t, base: "http://" + httpAddr, kafka: kafka,
		device: broker.Connect(t, mqtt.NewClientOptions().SetClientID("reported-devices"))}
	awaitReadyz(t, d.base)
	_, stats := callJSON(t, d.base, "GET", "/v1/stats", "", "")
	require.Equal(t, true, stats["hold_back"].(map[string]any)["active"], "the test is about a failure while hold-back is active")

	producer := kafka.Client(t)
	produce := func(key, payload string) {
		t.Helper()
		require.NoError(t, producer.ProduceSync(context.Background(),
			&kgo.Record{Topic: testenv.SignalsTopic, Key: []byte(key), Value: []byte(payload)}).FirstErr())
	}
	d.publish("devices/pump-mqtt/heartbeat", `{"type":"pump"}`)
	produce("pump-kafka", `{"type":"pump"}`)
	d.awaitOnline("pump-mqtt", "pump-kafka")
	time.Sleep(time.Second)
	failed := time.Now()
	d.publish("devices/pump-mqtt/heartbeat", `{"status":"fail","reason":"probe broken"}`)
	produce("pump-kafka", `{"status":"fail","reason":"probe broken"}`)

	all := d.await("interrupted", is(event.Interrupted, "pump-mqtt"), is(event.Interrupted, "pump-kafka"))
	for _, dev := range []string{"pump-mqtt", "pump-kafka"} {
		e := only(t, all, event.Interrupted, dev)
		require.Equal(t, event.CauseReported, e.Cause, dev)
		require.Equal(t, "probe broken", e.Reason, dev)
		require.Less(t, e.At.Sub(failed), 8*time.Second, "%s: reported %v after its failure", dev, e.At.Sub(failed))
		require.WithinRange(t, e.LastSeen, failed.Add(-time.Second), failed.Add(2*time.Second), dev)
		require.Equal(t, e.LastSeen, e.Deadline, "%s: due at its failure", dev)

		code, view := callJSON(t, d.base, "GET", "/v1/devices/"+dev, "", "")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "interrupted", view["state"], dev)
		require.Equal(t, "reported", view["cause"], dev)
		require.Equal(t, "probe broken", view["reason"], dev)
		require.Equal(t, e.Deadline.Format(time.RFC3339Nano), view["deadline"], dev)
		require.Equal(t, e.LastSeen.Format(time.RFC3339Nano), view["last_seen"], "%s: the failure, not a minute before it", dev)
	}
}
