package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAlertmanagerOutput(t *testing.T) {
	cfg, err := Parse([]byte(minimal), noEnv)
	require.NoError(t, err)
	am := cfg.Outputs.Alertmanager
	assert.False(t, am.Enabled(), "off by default")
	assert.Equal(t, DefaultAlertmanagerResendEvery, am.Resend())
	assert.Equal(t, DefaultAlertmanagerTimeout, am.PostTimeout())

	cfg, err = Parse([]byte(minimal+`
outputs:
  alertmanager:
    urls: ["http://am-0:9093", "https://proxy.example/alertmanager"]
    resend_every: 2s
    labels: ["team=iot", " env = prod "]
    timeout: 3s
`), noEnv)
	require.NoError(t, err)
	am = cfg.Outputs.Alertmanager
	assert.True(t, am.Enabled())
	assert.Equal(t, 2*time.Second, am.Resend())
	assert.Equal(t, 3*time.Second, am.PostTimeout())
	assert.Equal(t, map[string]string{"team": "iot", "env": "prod"}, am.LabelSet())
}

// Every key can be set from the environment, lists comma-separated; the token from a file, redacted
// when the configuration is printed.
func TestAlertmanagerOutputFromEnv(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "am-token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("am-s3cret\n"), 0o600))
	cfg, err := Parse([]byte(minimal), envMap(map[string]string{
		"HEARTBEATD_OUTPUTS_ALERTMANAGER_URLS":         "http://am-0:9093,http://am-1:9093",
		"HEARTBEATD_OUTPUTS_ALERTMANAGER_LABELS":       "team=iot,env=prod",
		"HEARTBEATD_OUTPUTS_ALERTMANAGER_RESEND_EVERY": "30s",
		"HEARTBEATD_OUTPUTS_ALERTMANAGER_TOKEN_FILE":   tokenFile,
	}))
	require.NoError(t, err)
	am := cfg.Outputs.Alertmanager
	assert.Equal(t, []string{"http://am-0:9093", "http://am-1:9093"}, am.URLs)
	assert.Equal(t, map[string]string{"team": "iot", "env": "prod"}, am.LabelSet())
	assert.Equal(t, 30*time.Second, am.Resend())
	assert.Equal(t, "am-s3cret", am.Token)
	assert.NotContains(t, cfg.String(), "am-s3cret")
	assert.Equal(t, Redaction, cfg.Redacted().Outputs.Alertmanager.Token)
}

func TestAlertmanagerOutputRejects(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"scheme", `{urls: ["am:9093"]}`, []string{"outputs.alertmanager.urls[0]", "http:// or https://"}},
		{"no host", `{urls: ["http://"]}`, []string{"outputs.alertmanager.urls[0]", "no host"}},
		{"credentials", `{urls: ["http://u:pw@am:9093"]}`, []string{"outputs.alertmanager.urls[0]", "token"}},
		{"query", `{urls: ["http://am:9093/?x=1"]}`, []string{"outputs.alertmanager.urls[0]", "no query"}},
		{"resend too often", `{urls: ["http://am:9093"], resend_every: 10ms}`, []string{"outputs.alertmanager.resend_every", "at least 1s"}},
		{"negative timeout", `{urls: ["http://am:9093"], timeout: -1s}`, []string{"outputs.alertmanager.timeout"}},
		{"label without value", `{labels: ["team"]}`, []string{"outputs.alertmanager.labels[0]", "name=value"}},
		{"bad label name", `{labels: ["1team=x"]}`, []string{"outputs.alertmanager.labels[0]", "not a label name"}},
		{"reserved label", `{labels: ["__x=y"]}`, []string{"outputs.alertmanager.labels[0]", "not a label name"}},
		{"own label", `{labels: ["device_id=x"]}`, []string{"outputs.alertmanager.labels[0]", "set by heartbeatd"}},
		{"label twice", `{labels: ["a=1", "a=2"]}`, []string{"outputs.alertmanager.labels[1]", "twice"}},
		{"tls without https", `{urls: ["http://am:9093"], tls: {enabled: true}}`, []string{"outputs.alertmanager.tls.enabled", "https://"}},
		{"tls files while off", `{urls: ["https://am:9093"], tls: {ca_file: x.pem}}`, []string{"outputs.alertmanager.tls.enabled"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parseFails(t, minimal+"outputs:\n  alertmanager: "+tt.yaml+"\n", noEnv, tt.want...)
		})
	}
	parseFails(t, minimal+"outputs:\n  alertmanager: {token: a, token_file: b}\n", noEnv, "outputs.alertmanager.token and outputs.alertmanager.token_file")
}
