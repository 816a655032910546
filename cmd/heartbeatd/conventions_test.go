package main_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// --version and -version print what `version` prints; help, -h and --help print the usage on stdout and
// exit 0, as operators' tooling expects.
func TestVersionAndHelpFlags(t *testing.T) {
	code, want, stderr := runBinary(t, nil, "version")
	require.Equal(t, 0, code, stderr)
	for _, arg := range []string{"--version", "-version"} {
		code, stdout, stderr := runBinary(t, nil, arg)
		require.Equal(t, 0, code, "%s: %s", arg, stderr)
		require.Equal(t, want, stdout, arg)
	}
	for _, arg := range []string{"help", "-h", "--help"} {
		code, stdout, stderr := runBinary(t, nil, arg)
		require.Equal(t, 0, code, "%s: %s", arg, stderr)
		require.Contains(t, stdout, "Usage:", arg)
		require.Contains(t, stdout, "HEARTBEATD_CONFIG", arg)
	}
	code, _, stderr = runBinary(t, nil, "-no-such-flag")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "Usage:")
}

// HEARTBEATD_CONFIG names the config file when -config is not given; -config still wins.
func TestConfigFromEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "from-env.yaml")
	require.NoError(t, os.WriteFile(path, []byte(goodConfig), 0o600))
	code, stdout, stderr := runBinary(t, []string{"HEARTBEATD_CONFIG=" + path}, "check-config")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, path+": ok")

	missing := filepath.Join(t.TempDir(), "missing.yaml")
	code, _, stderr = runBinary(t, []string{"HEARTBEATD_CONFIG=" + path}, "check-config", "-config", missing)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, missing)
}
