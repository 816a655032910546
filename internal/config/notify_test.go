package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNotifySecretsComeFromFilesOrTheEnvironmentAndAreNeverPrinted(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content+"\n"), 0o600))
		return p
	}
	pd, header, smtp := write("pd", "pd-routing-key-123"), write("hdr", "header-secret-456"), write("smtp", "smtp-pass-789")
	cfg, err := Parse([]byte(minimal+`
notify:
  enabled: true
  receivers:
    - name: oncall
      pagerduty: {routing_key_file: `+pd+`}
    - name: noc
      slack: {webhook_url: "${SLACK_URL}"}
      rate: 5/m
    - name: tickets
      webhook:
        url: http://tickets.internal/api/incidents
        headers: {X-Api-Key: {file: `+header+`}, Content-Type: application/json}
    - name: mail
      email: {smarthost: "smtp.internal:587", from: heartbeatd@example.com, to: [noc@example.com],
              username: heartbeatd, password_file: `+smtp+`}
  routes:
    - {match: ['device_type="gateway"'], receiver: oncall, continue: true}
    - {receiver: noc}
`), envMap(map[string]string{"SLACK_URL": "https://hooks.slack.test/services/T0/B0/slack-secret-000"}))
	require.NoError(t, err)
	n := cfg.Notify
	assert.Equal(t, "pd-routing-key-123", n.Receivers[0].PagerDuty.RoutingKey)
	assert.Equal(t, "https://hooks.slack.test/services/T0/B0/slack-secret-000", n.Receivers[1].Slack.WebhookURL)
	assert.Equal(t, "header-secret-456", n.Receivers[2].Webhook.Headers["X-Api-Key"].Value)
	assert.Equal(t, "smtp-pass-789", n.Receivers[3].Email.Password)
	every, burst, err := n.Receivers[1].RateLimit()
	require.NoError(t, err)
	assert.Equal(t, 12*time.Second, every)
	assert.Equal(t, DefaultNotifyBurst, burst)
	assert.Equal(t, DefaultNotifyKinds, n.Routes[1].RouteKinds())

	printed := cfg.String() + cfg.NotifyTable()
	for _, secret := range []string{"pd-routing-key-123", "slack-secret-000", "header-secret-456", "smtp-pass-789"} {
		assert.NotContains(t, printed, secret)
	}
	assert.Contains(t, cfg.NotifyTable(), "oncall")
	assert.Equal(t, "pd-routing-key-123", cfg.Notify.Receivers[0].PagerDuty.RoutingKey, "Redacted works on a copy")
}

func TestNotifyRefusesInlineSecretsAndBadReceiversNamingTheKey(t *testing.T) {
	err := parseFails(t, minimal+`
notify:
  receivers:
    - {name: oncall, pagerduty: {routing_key: inline-secret-1}}
`, noEnv, "notify.receivers[0].pagerduty.routing_key", "use routing_key_file or ${ENV}")
	assert.NotContains(t, err.Error(), "inline-secret-1")

	parseFails(t, minimal+`
notify:
  receivers:
    - {name: noc, slack: {webhook_url: "${UNSET_VAR}"}}
`, noEnv, "${UNSET_VAR} is not set")

	parseFails(t, minimal+`
notify:
  enabled: true
  receivers:
    - {name: "bad name", webhook: {url: "ftp://x"}, rate: "fast"}
    - {name: both, webhook: {url: "http://a"}, slack: {webhook_url: "${U}"}}
    - {name: m, email: {smarthost: "nohost", from: "not an address", to: []}}
  routes:
    - {receiver: nobody, kinds: [interrupted, watchdog]}
`, envMap(map[string]string{"U": "http://u"}),
		`notify.receivers[0].name: "bad name"`, `notify.receivers[0].rate: "fast"`, "notify.receivers[0].webhook.url",
		"notify.receivers[1]: set exactly one of", "notify.receivers[2].email.smarthost", "notify.receivers[2].email.from",
		"notify.receivers[2].email.to: required", `notify.routes[0].receiver: "nobody" is not a receiver`,
		`notify.routes[0].kinds[1]: "watchdog"`)

	parseFails(t, minimal+"notify: {enabled: true}\n", noEnv, "notify.routes: notify.enabled needs at least one route")
	parseFails(t, minimal+"ingest: {kafka: {group_id: hb}}\nnotify: {group_id: hb, receivers: [{name: a, webhook: {url: 'http://a'}}]}\n",
		noEnv, `notify.group_id: "hb" is ingest.kafka.group_id too`)
}
