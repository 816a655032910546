package config

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// The default MQTT client id names a persistent session: unique per replica, and the same after a
// restart (no pid in it), so the broker never keeps an orphan session for it.
func TestMQTTClientIDDefaultsToOnePerReplica(t *testing.T) {
	host, err := os.Hostname()
	require.NoError(t, err)
	parse := func(yml string) *Config {
		t.Helper()
		cfg, err := Parse([]byte("types: {default: {timeout: 60s}}\n"+yml), func(string) (string, bool) { return "", false })
		require.NoError(t, err)
		return cfg
	}
	require.Equal(t, "heartbeatd-"+host, parse("").MQTTClientID(), "the host name alone: the same after a restart")
	require.Equal(t, "heartbeatd-eu-1", parse("cluster: {replica_id: eu-1}").MQTTClientID())
	require.Equal(t, "mine", parse("ingest: {mqtt: {client_id: mine}}\ncluster: {replica_id: eu-1}").MQTTClientID())
}
