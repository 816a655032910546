package deploy_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// amtool runs amtool with args and returns its output; a missing amtool skips the test (fails it with
// CI=true).
func amtool(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runTool(t, "amtool", "Debian package prometheus-alertmanager", "", args...)
}

// deploy/alertmanager.yml is a valid Alertmanager configuration, and it routes as the README says: an
// alert heartbeatd marked inhibited_by to the receiver that sends nothing, every other alert to oncall.
func TestAlertmanagerConfig(t *testing.T) {
	out, err := amtool(t, "check-config", "alertmanager.yml")
	require.NoError(t, err, "amtool check-config:\n%s", out)
	for _, tc := range []struct {
		receiver string
		labels   []string
	}{
		{"null", []string{"alertname=DeviceSilent", "device_id=sensor-1", "parent=gw-1", "inhibited_by=gw-1"}},
		{"null", []string{"alertname=DeviceSilent", "device_id=sensor-2", "inhibited_by=outage:device_type:sensor/1"}},
		{"oncall", []string{"alertname=DeviceSilent", "device_id=gw-1", "device_type=gateway"}},
		{"oncall", []string{"alertname=DeviceSilent", "device_id=sensor-3", "parent=gw-1"}},
		{"oncall", []string{"alertname=DeviceOutage", "outage_id=outage:device_type:sensor/1"}},
	} {
		args := append([]string{"config", "routes", "test", "--config.file=alertmanager.yml", "--verify.receivers=" + tc.receiver}, tc.labels...)
		out, err := amtool(t, args...)
		require.NoError(t, err, "%s should go to %s:\n%s", strings.Join(tc.labels, " "), tc.receiver, out)
	}
}
