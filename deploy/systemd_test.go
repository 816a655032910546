package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// The unit is hardened, and systemd-analyze verify finds nothing to say about it (an unknown key is only
// a warning to systemd, so the output must be empty) when its ExecStart names the built binary.
func TestSystemdUnit(t *testing.T) {
	unit, err := os.ReadFile("systemd/heartbeatd.service")
	require.NoError(t, err)
	for _, want := range []string{"DynamicUser=yes", "ProtectSystem=strict", "ProtectHome=yes", "NoNewPrivileges=yes",
		"PrivateTmp=yes", "PrivateDevices=yes", "CapabilityBoundingSet=\n", "SystemCallFilter=@system-service",
		"RestrictAddressFamilies=", "MemoryDenyWriteExecute=yes", "ExecReload=/bin/kill -HUP $MAINPID",
		"Restart=on-failure", "LoadCredential=token:"} {
		require.Contains(t, string(unit), want)
	}

	execStart := regexp.MustCompile(`(?m)^ExecStart=/usr/local/bin/heartbeatd `)
	require.Regexp(t, execStart, string(unit))
	copied := execStart.ReplaceAllLiteralString(string(unit), "ExecStart="+testenv.HeartbeatdBinary(t)+" ")
	path := filepath.Join(t.TempDir(), "heartbeatd.service")
	require.NoError(t, os.WriteFile(path, []byte(copied), 0o644))
	out, err := runTool(t, "systemd-analyze", "Debian package systemd", "", "verify", path)
	require.NoError(t, err, "%s", out)
	require.Empty(t, strings.TrimSpace(out))

	// The check can fail: a misspelt key is reported.
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(copied, "ProtectHome=", "ProtectHom=", 1)), 0o644))
	out, _ = runTool(t, "systemd-analyze", "Debian package systemd", "", "verify", path)
	require.Contains(t, out, "Unknown key")
}
