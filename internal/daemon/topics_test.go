package daemon

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// runWithoutTopics runs heartbeatd against a Kafka that has none of its topics, with env's
// HEARTBEATD_* overrides, until the test ends; it returns the cluster, the HTTP address and the log.
func runWithoutTopics(t *testing.T, env map[string]string) (*testenv.Kafka, string, *observer.ObservedLogs) {
	t.Helper()
	rdb := testenv.StartRedis(t)
	broker := testenv.StartMosquitto(t)
	k := testenv.StartKafka(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	path := filepath.Join(t.TempDir(), "heartbeatd.yaml")
	servers := testenv.HeartbeatdConfig{Redis: rdb.Addr, Slots: 4, MQTT: broker.Addr, ClientID: "topics", Kafka: k.Addrs}
	require.NoError(t, os.WriteFile(path, []byte(servers.YAML(fmt.Sprintf("types: {default: {timeout: 1m}}\nhttp: {listen: %q}\nshutdown_timeout: %s\n",
		httpAddr, shutdownTimeout))), 0o600))
	core, logs := observer.New(zapcore.InfoLevel)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{ConfigPath: path, Logger: zap.New(core), Reload: make(chan struct{}),
			Env: func(name string) (string, bool) { v, ok := env[name]; return v, ok }})
	}()
	t.Cleanup(func() { cancel(); awaitReturn(t, done) })
	return k, httpAddr, logs
}

// readyz is /readyz's status code and body, or 0 while the server does not answer.
func readyz(httpAddr string) (int, string) {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A first start against a bare cluster: heartbeatd creates its two topics with the configured
// partitions, says so in the log, and becomes ready.
func TestRunCreatesMissingTopics(t *testing.T) {
	k, httpAddr, logs := runWithoutTopics(t, map[string]string{
		"HEARTBEATD_EVENTS_KAFKA_CREATE_TOPICS_PARTITIONS":         "4",
		"HEARTBEATD_EVENTS_KAFKA_CREATE_TOPICS_REPLICATION_FACTOR": "1",
	})
	require.Eventually(t, func() bool { code, _ := readyz(httpAddr); return code == http.StatusOK }, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, map[string]int{"heartbeat.events": 4, "heartbeat.deadletter": 4},
		k.Partitions(t, "heartbeat.events", "heartbeat.deadletter"))
	require.Equal(t, 1, logs.FilterMessage("created Kafka topics").Len())
}

// With creation off, heartbeatd stays unready; /readyz and an error in the log name each missing topic
// and the command that creates it, and nothing is created behind the operator's back.
func TestRunWithoutTopicCreationNamesTheCommands(t *testing.T) {
	k, httpAddr, logs := runWithoutTopics(t, map[string]string{"HEARTBEATD_EVENTS_KAFKA_CREATE_TOPICS_ENABLED": "false"})
	cmd := func(topic string) string {
		return "kafka-topics.sh --bootstrap-server " + k.Addrs[0] + " --create --topic " + topic + " --partitions 12 --replication-factor 3"
	}
	var body string
	require.Eventually(t, func() bool {
		var code int
		code, body = readyz(httpAddr)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "kafka-topics.sh")
	}, 30*time.Second, 50*time.Millisecond)
	require.Contains(t, body, cmd("heartbeat.events"))
	require.Contains(t, body, cmd("heartbeat.deadletter"))

	require.Eventually(t, func() bool {
		return logs.FilterMessageSnippet("events.kafka.create_topics is off").Len() > 0
	}, 30*time.Second, 50*time.Millisecond)
	entry := logs.FilterMessageSnippet("events.kafka.create_topics is off").All()[0]
	require.Equal(t, zapcore.ErrorLevel, entry.Level)
	fields := entry.ContextMap()
	require.Equal(t, []any{"heartbeat.events", "heartbeat.deadletter"}, fields["topics"])
	require.Equal(t, []any{cmd("heartbeat.events"), cmd("heartbeat.deadletter")}, fields["commands"])
	require.Empty(t, k.Partitions(t, "heartbeat.events", "heartbeat.deadletter"))
}
