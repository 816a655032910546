// Package deploy_test checks the operator's kit in deploy/ against the real thing: the alert rules and
// the dashboard against the metrics a running heartbeatd exposes and against promtool, the Helm chart
// with helm lint and helm template, the systemd unit with systemd-analyze, and docker-compose.yml.
package deploy_test

import (
	"os/exec"
	"testing"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// TestMain removes the heartbeatd binary the tests built once they all ended.
func TestMain(m *testing.M) { testenv.MainWithBinary(m) }

// runTool runs bin with args in dir (empty: the test's own) and returns its combined output; a missing
// bin skips the test (fails it with CI=true), naming what installs it.
func runTool(t *testing.T, bin, install, dir string, args ...string) (string, error) {
	t.Helper()
	path, err := testenv.LookPath(bin)
	if err != nil {
		testenv.Need(t, bin+" ("+install+")", err)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}
