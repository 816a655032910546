package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// TestSecondReplicaOfTheSameClientIDRefusesToStart: two replicas on one host with neither
// cluster.replica_id nor ingest.mqtt.client_id derive one MQTT client id (heartbeatd-<host>). The second
// exits with status 1 and an error naming both keys, before it connects to the broker: the first keeps
// its session (mosquitto logs no takeover) and keeps turning signals into events.
func TestSecondReplicaOfTheSameClientIDRefusesToStart(t *testing.T) {
	s := startSmokeAs(t, "")
	host, err := os.Hostname()
	require.NoError(t, err)
	clientID := "heartbeatd-" + host

	path := filepath.Join(t.TempDir(), "heartbeatd.yaml")
	require.NoError(t, os.WriteFile(path, []byte(s.config(smokeTypes)), 0o600))
	listen := fmt.Sprintf("HEARTBEATD_HTTP_LISTEN=127.0.0.1:%d", testenv.FreePort(t))
	code, _, stderr := runBinary(t, []string{listen}, "run", "-config", path)
	require.Equal(t, 1, code, "the second replica must exit non-zero\n%s", stderr)
	for _, want := range []string{fmt.Sprintf("MQTT client id %q", clientID), "in use by running replica", "cluster.replica_id",
		"ingest.mqtt.client_id"} {
		require.Contains(t, stderr, want)
	}

	broker, err := os.ReadFile(filepath.Join(s.broker.Dir(), "mosquitto.log"))
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(string(broker), " as "+clientID+" "), "one session of %s, never a second\n%s", clientID, broker)
	require.NotContains(t, string(broker), "Client "+clientID+" already connected", "the first replica's session was taken over")

	s.awaitReady(t)
	s.publish(t, "dev-after-refusal", `{"type":"gateway"}`)
	s.awaitEvent(t, "dev-after-refusal", event.Interrupted)
	require.False(t, s.hb.Exited())
}
