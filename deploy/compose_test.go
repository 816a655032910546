package deploy_test

import (
	"encoding/base64"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/heartbeatd/heartbeatd/internal/config"
)

// composeFile is the part of docker-compose.yml the test reads.
type composeFile struct {
	Secrets  map[string]struct{ File string }
	Services map[string]struct {
		Image, Restart string
		Profiles       []string
		Environment    map[string]string
		Volumes        []string
		Secrets        []string
		Ports          []string
		Command        []string
	}
	Volumes map[string]any
}

// docker-compose.yml keeps every long-running service's data on a named volume (Kafka's included: the
// apache/kafka image writes to /tmp unless KAFKA_LOG_DIRS says otherwise), restarts them, mounts the
// files of the observability stack that exist here, and every secret it names is made by init.sh.
func TestComposeFile(t *testing.T) {
	b, err := os.ReadFile("../docker-compose.yml")
	require.NoError(t, err)
	var c composeFile
	require.NoError(t, yaml.Unmarshal(b, &c))

	for name, s := range c.Services {
		if name == "kafka-topics" || len(s.Profiles) > 0 {
			continue // runs once, or on request
		}
		require.Equal(t, "unless-stopped", s.Restart, "service %s", name)
		for _, v := range s.Volumes {
			src, rest, _ := strings.Cut(v, ":")
			target, _, _ := strings.Cut(rest, ":")
			if strings.HasPrefix(src, "./") {
				_, err := os.Stat(filepath.Join("..", src))
				require.NoError(t, err, "service %s mounts %s", name, src)
				continue
			}
			require.Contains(t, c.Volumes, src, "service %s: volume %s is declared", name, src)
			if name == "kafka" {
				require.Equal(t, target, s.Environment["KAFKA_LOG_DIRS"], "Kafka writes where its volume is")
			}
		}
	}
	kafka := c.Services["kafka"]
	require.NotEmpty(t, kafka.Environment["KAFKA_LOG_DIRS"])
	id, err := base64.RawURLEncoding.DecodeString(kafka.Environment["CLUSTER_ID"])
	require.NoError(t, err, "CLUSTER_ID is a base64 UUID")
	require.Len(t, id, 16, "CLUSTER_ID is a base64 UUID")
	require.Contains(t, c.Services["redis"].Image, "redis")
	require.Contains(t, strings.Join(c.Services["prometheus"].Volumes, " "), "./deploy/prometheus:/etc/prometheus")
	require.Equal(t, "/run/secrets/api-token", c.Services["heartbeatd"].Environment["HEARTBEATD_HTTP_TOKEN_FILE"])
	// The wall screen's read-only token comes from a secret heartbeatd mounts (internal/daemon's
	// TestComposeDeployment runs it).
	require.Contains(t, c.Services["heartbeatd"].Secrets, "api-token-wall")
	require.Contains(t, c.Services["heartbeatd"].Environment["HEARTBEATD_HTTP_TOKENS"], "token_file: /run/secrets/api-token-wall")

	// init.sh makes every secret file the compose file names.
	require.Contains(t, c.Services["mosquitto"].Secrets, "mqtt-devices")
	dir := t.TempDir()
	script, err := os.ReadFile("secrets/init.sh")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "init.sh"), script, 0o755))
	out, err := exec.Command("sh", filepath.Join(dir, "init.sh")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	for name, s := range c.Secrets {
		require.True(t, strings.HasPrefix(s.File, "./deploy/secrets/"), name)
		st, err := os.Stat(filepath.Join(dir, strings.TrimPrefix(s.File, "./deploy/secrets/")))
		require.NoError(t, err, "init.sh does not make secret %s", name)
		require.Positive(t, st.Size())
	}
}

// listeners maps each listener name of a KAFKA_*LISTENERS value to its host:port.
func listeners(t *testing.T, value string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range strings.Split(value, ",") {
		name, addr, ok := strings.Cut(l, "://")
		require.True(t, ok, "listener %q", l)
		out[name] = addr
	}
	return out
}

// Kafka answers both where heartbeatd dials it (kafka:9092 on the compose network, configs/compose.yaml)
// and on the host's loopback: a client reconnects to the address the listener it reached advertises, so
// the host listener must advertise the published address. heartbeatd creates its own topics with a
// replication factor the one broker accepts; the kafka-topics service creates the signal topics.
func TestComposeKafkaListeners(t *testing.T) {
	b, err := os.ReadFile("../docker-compose.yml")
	require.NoError(t, err)
	var c composeFile
	require.NoError(t, yaml.Unmarshal(b, &c))
	kafka := c.Services["kafka"]
	bound := listeners(t, kafka.Environment["KAFKA_LISTENERS"])
	advertised := listeners(t, kafka.Environment["KAFKA_ADVERTISED_LISTENERS"])
	protocols := map[string]string{}
	for _, p := range strings.Split(kafka.Environment["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"], ",") {
		name, proto, _ := strings.Cut(p, ":")
		protocols[name] = proto
	}

	// The secrets compose mounts, here.
	pw := filepath.Join(t.TempDir(), "mqtt-password")
	require.NoError(t, os.WriteFile(pw, []byte("pw"), 0o600))
	env := map[string]string{"HEARTBEATD_INGEST_MQTT_PASSWORD_FILE": pw, "HEARTBEATD_HTTP_TOKEN": "a-token-for-this-test"}
	cfg, err := config.LoadEnv("../configs/compose.yaml", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	require.Equal(t, []string{advertised["PLAINTEXT"]}, cfg.Events.Kafka.Brokers, "heartbeatd dials the network listener")
	require.Equal(t, []string{advertised["PLAINTEXT"]}, cfg.Ingest.Kafka.Brokers)
	require.Equal(t, "PLAINTEXT", kafka.Environment["KAFKA_INTER_BROKER_LISTENER_NAME"])

	host, port, err := net.SplitHostPort(advertised["EXTERNAL"])
	require.NoError(t, err, "an EXTERNAL listener for the host")
	require.Equal(t, "127.0.0.1", host, "advertised as the host reaches it")
	require.Equal(t, ":"+port, bound["EXTERNAL"], "bound in the container on the advertised port")
	require.Equal(t, "PLAINTEXT", protocols["EXTERNAL"])
	require.Contains(t, kafka.Ports, "127.0.0.1:"+port+":"+port, "published on the host's loopback only")
	for name := range advertised {
		require.Contains(t, bound, name, "advertised listener %s is bound", name)
		require.Contains(t, protocols, name, "listener %s has a protocol", name)
	}

	require.True(t, cfg.Events.Kafka.CreateTopics.Enabled, "heartbeatd creates its topics")
	require.Equal(t, 1, cfg.Events.Kafka.CreateTopics.ReplicationFactor, "one broker")
	script := strings.Join(c.Services["kafka-topics"].Command, "\n")
	for _, topic := range cfg.Ingest.Kafka.Topics {
		require.Contains(t, script, "--topic "+topic+" ", "the kafka-topics service creates signal topic %s", topic)
	}
}
