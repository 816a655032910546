// Package deploy_test checks the operator's kit in deploy/ against the real thing: the alert rules and
// the dashboard against the metrics a running heartbeatd exposes and against promtool, the Helm chart
// with helm lint and helm template, the systemd unit with systemd-analyze, and docker-compose.yml.
package deploy_test

import (
	"testing"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// TestMain removes the heartbeatd binary the tests built once they all ended.
func TestMain(m *testing.M) { testenv.MainWithBinary(m) }
