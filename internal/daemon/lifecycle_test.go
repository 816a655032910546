package daemon

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// shutdownTimeout is the config's shutdown_timeout in these tests: Run must return within it.
const shutdownTimeout = 5 * time.Second

func writeConfig(t *testing.T, redisAddr, mqttAddr string, kafka []string, httpAddr string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "heartbeatd.yaml")
	servers := testenv.HeartbeatdConfig{Redis: redisAddr, Slots: 4, MQTT: mqttAddr, ClientID: "lifecycle", Kafka: kafka}
	cfg := servers.YAML(fmt.Sprintf(`
types:
  default: {timeout: 500ms, repeat_every: 0s}
detection: {grace_after_outage: 100ms}
http: {listen: %q}
shutdown_timeout: %s
`, httpAddr, shutdownTimeout))
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	return path
}

// runDaemon starts Run in a goroutine; the returned channel yields its result.
func runDaemon(t *testing.T, ctx context.Context, path string, started func(string)) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{ConfigPath: path, Build: BuildInfo{Version: "test"}, Logger: zaptest.NewLogger(t),
			Reload: make(chan struct{}), Started: started})
	}()
	return done
}

// startDaemon runs the daemon on the config at path until the test ends (then asserts it returns nil),
// and returns once it started, with stop, which ends it earlier (at most once).
func startDaemon(t *testing.T, path string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan string, 1)
	done := runDaemon(t, ctx, path, func(addr string) { started <- addr })
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); awaitReturn(t, done) }) }
	t.Cleanup(stop)
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("Run ended before it started: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not start within 20s")
	}
	return stop
}

// awaitReturn asserts Run returns nil within the shutdown timeout (plus slack for a loaded machine).
func awaitReturn(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(shutdownTimeout + 2*time.Second):
		t.Fatalf("Run did not return within shutdown_timeout %v", shutdownTimeout)
	}
}

// TestRunStopsCleanly runs the whole daemon on real servers, takes one signal to an interrupted event so
// every component has done real work (connections, scanner, publisher), cancels, and checks that Run
// returns nil and leaves no goroutine behind.
func TestRunStopsCleanly(t *testing.T) {
	rdb := testenv.StartRedis(t)
	broker := testenv.StartMosquitto(t)
	kafka := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{"heartbeat.events", "heartbeat.deadletter"}})
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	path := writeConfig(t, rdb.Addr, broker.Addr, kafka.Addrs, httpAddr)
	// The servers' own goroutines (kfake runs in-process, testenv waits on its children) are not ours,
	// nor are the in-process broker's ends of the connections heartbeatd closed: kfake notices the close
	// a moment later, longer than goleak waits on a loaded machine.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreTopFunction("github.com/twmb/franz-go/pkg/kfake.(*clientConn).read"),
		goleak.IgnoreTopFunction("github.com/twmb/franz-go/pkg/kfake.(*clientConn).write"))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan string, 1)
	done := runDaemon(t, ctx, path, func(addr string) { started <- addr })
	select {
	case addr := <-started:
		require.Equal(t, httpAddr, addr)
	case err := <-done:
		t.Fatalf("Run ended before it started: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not start within 20s")
	}

	// No keep-alive connection may outlive the test: its goroutines would count as a leak.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	require.Eventually(t, func() bool {
		resp, err := client.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 20*time.Second, 20*time.Millisecond)

	dev := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(broker.Addr).SetClientID("lifecycle-device"))
	tok := dev.Connect()
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())
	tok = dev.Publish("devices/dev-1/heartbeat", 1, false, "")
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())
	dev.Disconnect(0)

	var ev event.Event
	require.Eventually(t, func() bool {
		for _, r := range kafka.ReadAll(t, "heartbeat.events", 1, 2*time.Second) {
			e, err := event.Decode(r.Value)
			require.NoError(t, err)
			if e.DeviceID == "dev-1" {
				ev = e
				return true
			}
		}
		return false
	}, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, event.Interrupted, ev.Kind)

	cancel()
	awaitReturn(t, done)
	_, err := client.Get("http://" + httpAddr + "/healthz")
	require.Error(t, err, "the HTTP server must be closed once Run returns")
}

// TestRunStopsWhileWaitingForRedis: heartbeatd may start before Redis; a shutdown while it waits must not
// hang in the retry loop or leave its HTTP server and clients behind.
func TestRunStopsWhileWaitingForRedis(t *testing.T) {
	broker := testenv.StartMosquitto(t)
	kafka := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{"heartbeat.events", "heartbeat.deadletter"}})
	noRedis := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	path := writeConfig(t, noRedis, broker.Addr, kafka.Addrs, httpAddr)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runDaemon(t, ctx, path, func(string) { t.Error("Started called without Redis") })

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	var body string
	require.Eventually(t, func() bool {
		resp, err := client.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusServiceUnavailable
	}, 20*time.Second, 20*time.Millisecond, "/readyz must answer 503 while Redis is awaited")
	require.Contains(t, body, "redis")

	cancel()
	awaitReturn(t, done)
}

// TestRunRefusesASlotCountTheFleetCannotAdopt: a redis.slots below the fleet's, or more than twice it, is
// the configuration's mistake (docs/scaling.md#doubling-the-slot-count-online), so Run ends with the
// error that says which count to write, rather than waiting for Redis forever.
func TestRunRefusesASlotCountTheFleetCannotAdopt(t *testing.T) {
	redis := testenv.StartRedis(t)
	broker := testenv.StartMosquitto(t)
	kafka := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{"heartbeat.events", "heartbeat.deadletter"}})
	store, err := deadline.New(redis.Client(t), deadline.Options{Slots: 8, Timeout: func(string) time.Duration { return time.Minute }})
	require.NoError(t, err)
	_, err = store.SyncLayout(context.Background(), 8)
	require.NoError(t, err)

	for _, c := range []struct {
		slots int
		want  error
		says  string
	}{
		{4, deadline.ErrHalving, "set redis.slots to 8"},
		{32, deadline.ErrStepTooLarge, "double one step at a time (16)"},
	} {
		t.Run(fmt.Sprint(c.slots), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "heartbeatd.yaml")
			servers := testenv.HeartbeatdConfig{Redis: redis.Addr, Slots: c.slots, MQTT: broker.Addr, ClientID: "slots", Kafka: kafka.Addrs}
			cfg := servers.YAML(fmt.Sprintf("types:\n  default: {timeout: 1m}\nhttp: {listen: \"127.0.0.1:%d\"}\n", testenv.FreePort(t)))
			require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			done := runDaemon(t, ctx, path, func(string) { t.Error("Started with a slot count the fleet cannot adopt") })
			select {
			case err := <-done:
				require.ErrorIs(t, err, c.want)
				require.ErrorContains(t, err, c.says)
			case <-time.After(20 * time.Second):
				t.Fatal("Run still waits 20s after Redis refused the slot count")
			}
		})
	}
}
