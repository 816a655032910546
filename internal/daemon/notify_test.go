package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// A daemon with notify.enabled pages through its own consumer group: a device that falls silent reaches
// the webhook as interrupted, and its return as recovered.
func TestTheDaemonWithNotifyEnabledPagesASilentDeviceAndItsRecovery(t *testing.T) {
	var mu sync.Mutex
	var got []event.Event
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var d struct {
			Event event.Event `json:"event"`
		}
		if json.Unmarshal(body, &d) == nil {
			mu.Lock()
			got = append(got, d.Event)
			mu.Unlock()
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(hook.Close)
	received := func() []event.Event {
		mu.Lock()
		defer mu.Unlock()
		return append([]event.Event(nil), got...)
	}

	rdb := testenv.StartRedis(t)
	broker := testenv.StartMosquitto(t)
	kafka := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{testenv.EventsTopic, testenv.DeadLetterTopic}})
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	path := filepath.Join(t.TempDir(), "heartbeatd.yaml")
	servers := testenv.HeartbeatdConfig{Redis: rdb.Addr, Slots: 4, MQTT: broker.Addr, ClientID: "notify", Kafka: kafka.Addrs}
	require.NoError(t, os.WriteFile(path, []byte(servers.YAML(fmt.Sprintf(`
types:
  default: {timeout: 1s, repeat_every: 1m}
detection: {grace_after_outage: 100ms}
http: {listen: %q}
shutdown_timeout: %s
notify:
  enabled: true
  receivers:
    - {name: tickets, webhook: {url: %q}}
  routes:
    - {receiver: tickets}
`, httpAddr, shutdownTimeout, hook.URL))), 0o600))
	startDaemon(t, path)
	awaitReadyz(t, "http://"+httpAddr)
	device := broker.Connect(t, mqtt.NewClientOptions().SetClientID("notify-devices"))
	signal := func() {
		tok := device.Publish("devices/pump-1/heartbeat", 1, false, "")
		require.True(t, tok.WaitTimeout(10*time.Second))
		require.NoError(t, tok.Error())
	}

	signal()
	require.Eventually(t, func() bool { return len(received()) == 1 }, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, event.Interrupted, received()[0].Kind)
	require.Equal(t, "pump-1", received()[0].DeviceID)
	signal()
	require.Eventually(t, func() bool { return len(received()) == 2 }, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, event.Recovered, received()[1].Kind)
}
