package deploy_test

import (
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
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

	// init.sh makes every secret file the compose file names.
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
