package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// Named tokens come from Secrets the operator made: the chart mounts each key as a file and writes
// http.tokens with its token_file, never a token in the ConfigMap; heartbeatd accepts the result.
func TestHelmChartNamedTokens(t *testing.T) {
	tokens := `apiTokens=[{"name":"ops","role":"operate","secretName":"hb-ops"},` +
		`{"name":"berlin","role":"read","scope":"labels.site=berlin","secretName":"hb-berlin","secretKey":"viewer"}]`
	out, err := helm(t, "lint", "--strict", chart, "--set-json", tokens)
	require.NoError(t, err, out)
	objs := render(t, "--set-json", tokens)

	cfg := objs["ConfigMap"].at("data", "heartbeatd.yaml").(string)
	require.Contains(t, cfg, "token_file: /etc/heartbeatd/tokens/ops")
	require.Contains(t, cfg, "scope: labels.site=berlin")
	pod := object(objs["StatefulSet"].at("spec", "template", "spec").(map[string]any))
	vol := object(pod.at("volumes", 2).(map[string]any))
	require.Equal(t, "tokens", vol.at("name"))
	require.Equal(t, "hb-ops", vol.at("projected", "sources", 0, "secret", "name"))
	require.Equal(t, "token", vol.at("projected", "sources", 0, "secret", "items", 0, "key"), "the default key")
	require.Equal(t, "ops", vol.at("projected", "sources", 0, "secret", "items", 0, "path"))
	require.Equal(t, "viewer", vol.at("projected", "sources", 1, "secret", "items", 0, "key"))
	c := object(pod.at("containers", 0).(map[string]any))
	require.Equal(t, "/etc/heartbeatd/tokens", c.at("volumeMounts", 2, "mountPath"))

	// check-config, as the pod would run it, with the token files where the mount puts them.
	root := t.TempDir()
	files := map[string]string{
		"/etc/heartbeatd/config/heartbeatd.yaml": strings.ReplaceAll(cfg, "/etc/heartbeatd/", root+"/etc/heartbeatd/"),
		"/etc/heartbeatd/secrets/api-token":      "admin-token-for-the-test",
		"/etc/heartbeatd/tokens/ops":             "ops-token-for-the-test",
		"/etc/heartbeatd/tokens/berlin":          "berlin-token-for-the-test",
	}
	for name, content := range files {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(root, name), []byte(content), 0o600))
	}
	cmd := exec.Command(testenv.HeartbeatdBinary(t), "check-config", "-config", filepath.Join(root, "/etc/heartbeatd/config/heartbeatd.yaml"))
	cmd.Env = append(os.Environ(), "HEARTBEATD_HTTP_TOKEN_FILE="+filepath.Join(root, "/etc/heartbeatd/secrets/api-token"),
		"HEARTBEATD_HTTP_LISTEN=0.0.0.0:8080")
	got, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", got)
	require.Regexp(t, `(?m)^berlin\s+read\s+labels\.site=berlin\s+token_file `, string(got))
	require.NotContains(t, string(got), "ops-token-for-the-test")

	msg, err := helm(t, "template", "hb", chart, "--set-json", `apiTokens=[{"name":"ops","role":"operate"}]`)
	require.Error(t, err)
	require.Contains(t, msg, "apiTokens: each entry needs name, role and secretName")
}

// The notify receivers' secrets are mounted from Secrets the operator names, as files the config's
// *_file keys read: check-config, as the pod would run it, accepts the chart's config with them.
func TestHelmChartNotifySecrets(t *testing.T) {
	values := `notifySecrets=[{"name":"pagerduty","secretName":"hb-pagerduty"},{"name":"slack","secretName":"hb-slack","secretKey":"url"}]`
	config := `config.notify={"enabled":true,"receivers":[{"name":"oncall","pagerduty":{"routing_key_file":"/etc/heartbeatd/notify/pagerduty"}},` +
		`{"name":"noc","slack":{"webhook_url_file":"/etc/heartbeatd/notify/slack"}}],"routes":[{"receiver":"oncall","continue":true},{"receiver":"noc"}]}`
	out, err := helm(t, "lint", "--strict", chart, "--set-json", values, "--set-json", config)
	require.NoError(t, err, out)
	objs := render(t, "--set-json", values, "--set-json", config)
	pod := object(objs["StatefulSet"].at("spec", "template", "spec").(map[string]any))
	vol := object(pod.at("volumes", 2).(map[string]any))
	require.Equal(t, "notify", vol.at("name"))
	require.Equal(t, "hb-pagerduty", vol.at("projected", "sources", 0, "secret", "name"))
	require.Equal(t, "token", vol.at("projected", "sources", 0, "secret", "items", 0, "key"), "the default key")
	require.Equal(t, "url", vol.at("projected", "sources", 1, "secret", "items", 0, "key"))
	c := object(pod.at("containers", 0).(map[string]any))
	require.Equal(t, "/etc/heartbeatd/notify", c.at("volumeMounts", 2, "mountPath"))

	cfg := objs["ConfigMap"].at("data", "heartbeatd.yaml").(string)
	root := t.TempDir()
	files := map[string]string{
		"/etc/heartbeatd/config/heartbeatd.yaml": strings.ReplaceAll(cfg, "/etc/heartbeatd/", root+"/etc/heartbeatd/"),
		"/etc/heartbeatd/secrets/api-token":      "admin-token-for-the-test",
		"/etc/heartbeatd/notify/pagerduty":       "pd-key-for-the-test",
		"/etc/heartbeatd/notify/slack":           "https://hooks.slack.example/services/slack-secret-for-the-test",
	}
	for name, content := range files {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(root, name), []byte(content), 0o600))
	}
	cmd := exec.Command(testenv.HeartbeatdBinary(t), "check-config", "-config", filepath.Join(root, "/etc/heartbeatd/config/heartbeatd.yaml"))
	cmd.Env = append(os.Environ(), "HEARTBEATD_HTTP_TOKEN_FILE="+filepath.Join(root, "/etc/heartbeatd/secrets/api-token"),
		"HEARTBEATD_HTTP_LISTEN=0.0.0.0:8080")
	got, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", got)
	require.Contains(t, string(got), "oncall")
	for _, secret := range []string{"pd-key-for-the-test", "slack-secret-for-the-test"} {
		require.NotContains(t, string(got), secret)
	}

	msg, err := helm(t, "template", "hb", chart, "--set-json", `notifySecrets=[{"name":"pagerduty"}]`)
	require.Error(t, err)
	require.Contains(t, msg, "notifySecrets: each entry needs name and secretName")
}
