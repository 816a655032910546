package main_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// runBinary runs the real heartbeatd binary with args and returns its exit code and output.
func runBinary(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	bin := testenv.HeartbeatdBinary(t) // built first: the build must not eat the run's time limit
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("run heartbeatd %v: %v", args, err)
	}
	return code, out.String(), errOut.String()
}

// Secrets the check-config cases carry; none may ever show in its output.
const (
	redisPassword = "redis-pw-8d1f"
	httpToken     = "http-token-77c2"
	mqttPassword  = "mqtt-pw-3b9e"
	amKey         = "am-key-5e0a" // in an Alertmanager URL's query or userinfo
	pdKey         = "pd-key-c41d" // a PagerDuty routing key
)

// withNotify is goodConfig with a notify block whose PagerDuty key comes from $PD_KEY; slackText is its
// Slack receiver's template.
func withNotify(slackText string) string {
	return goodConfig + `notify:
  receivers:
    - {name: oncall, pagerduty: {routing_key: "${PD_KEY}"}}
    - {name: noc, slack: {webhook_url: "${PD_KEY}", text: '` + slackText + `'}}
  routes:
    - {match: ['site=~"ber.*"'], receiver: oncall}
`
}

// withAlertmanager is goodConfig with an Alertmanager URL.
func withAlertmanager(url string) string {
	return goodConfig + "outputs: {alertmanager: {urls: [\"" + url + "\"]}}\n"
}

const goodConfig = `
redis: {addrs: ["127.0.0.1:6379"], password: "` + redisPassword + `"}
types:
  default: {timeout: 60s, repeat_every: 5m, max_repeats: 12}
  gateway: {timeout: 30s, repeat_every: 1m}
  temperature-sensor: {timeout: 10m}
ingest:
  mqtt:
    brokers: ["tcp://user:` + mqttPassword + `@127.0.0.1:1883"]
    subscriptions: [{topic: "devices/{device_id}/heartbeat"}]
events:
  kafka: {brokers: ["127.0.0.1:9092"]}
http: {token: "` + httpToken + `"}
`

// schedulesConfig is goodConfig with time intervals and scheduled types.
var schedulesConfig = strings.Replace(goodConfig, "  temperature-sensor: {timeout: 10m}\n", `  temperature-sensor: {timeout: 10m}
  solar: {timeout: 10m, quiet: [night]}
  meter: {schedule: "0 2 * * *", schedule_tz: Europe/Berlin, grace: 30m}
`, 1) + `
time_intervals:
  - name: night
    time_intervals: [{times: [{start_time: "22:00", end_time: "24:00"}, {start_time: "00:00", end_time: "06:00"}], location: Europe/Berlin}]
`

func TestCheckConfig(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config string
		env    []string
		code   int
		want   []string // in stdout on success, in stderr on failure
	}{
		{name: "good", config: goodConfig, code: 0,
			want: []string{": ok", "TYPE", "gateway", "30s", "temperature-sensor", "10m", "correlation: off"}},
		{name: "correlation", config: goodConfig + "\ncorrelation: {by: [device_type, labels.site], min_devices: 40, window: 15s}\n", code: 0,
			want: []string{"correlation: by device_type, labels.site; an outage is 40 or more devices of one group interrupted within 15s"}},
		{name: "bad correlation key", code: 1, config: goodConfig + "\ncorrelation: {by: [site]}\n",
			want: []string{"correlation.by[0]"}},
		{name: "env override", config: goodConfig, env: []string{"HEARTBEATD_REDIS_PASSWORD=" + redisPassword + "-env"}, code: 0,
			want: []string{": ok"}},
		{name: "zero batch", code: 1, config: goodConfig + "\n" + `
detection: {batch: 0}
`, want: []string{"detection.batch"}},
		{name: "zero type timeout", code: 1,
			config: regexp.MustCompile(`gateway: \{timeout: 30s`).ReplaceAllString(goodConfig, "gateway: {timeout: 0s"),
			want:   []string{"types.gateway.timeout"}},
		{name: "unknown key", code: 1, config: goodConfig + "\nredis_url: x\n", want: []string{"redis_url"}},
		{name: "nested unknown key", code: 1,
			config: regexp.MustCompile(`password: "`).ReplaceAllString(goodConfig, `pasword: "`), want: []string{"redis.pasword"}},
		{name: "bad broker with a password", code: 1,
			config: regexp.MustCompile(`tcp://user`).ReplaceAllString(goodConfig, "gopher://user"), want: []string{"ingest.mqtt.brokers[0]"}},
		{name: "missing file", code: 1, want: []string{"missing.yaml"}},
		// A URL is quoted with its query's values and its userinfo redacted (issue 58, 5).
		{name: "alertmanager url with an api key in its query", code: 1,
			config: withAlertmanager("https://am.example:9093/?api_key=" + amKey + "&tenant=" + amKey),
			want:   []string{"outputs.alertmanager.urls[0]", "api_key=redacted&tenant=redacted", "a base URL has no query"}},
		{name: "alertmanager url with a password and no host", code: 1, config: withAlertmanager("https://admin:" + amKey + "@/?k=" + amKey),
			want: []string{"outputs.alertmanager.urls[0]", "no host"}},
		{name: "alertmanager url with a token as its user", code: 1, config: withAlertmanager("https://" + amKey + "@am.example:9093"),
			want: []string{"outputs.alertmanager.urls[0]", "credentials in the URL"}},
		{name: "alertmanager url of another scheme", code: 1, config: withAlertmanager("ftp://am.example/?api_key=" + amKey),
			want: []string{"outputs.alertmanager.urls[0]", "want an http:// or https:// base URL"}},
		{name: "alertmanager url unparsable", code: 1, config: withAlertmanager("https://am.example:9093/%zz?api_key=" + amKey),
			want: []string{"outputs.alertmanager.urls[0]", "is not a URL"}},
		{name: "schedules", code: 0, config: schedulesConfig,
			want: []string{"SCHEDULES", "solar:", "quiet: night", "Z  quiet", "Z  watched again",
				`schedule: "0 2 * * *" in Europe/Berlin, grace 30m`, "Z  expected"}},
		{name: "notify", code: 0, config: withNotify("{{ .DeviceID }}"), env: []string{"PD_KEY=https://hooks.example/" + pdKey},
			want: []string{"notifications (group heartbeatd-notify", `site=~"ber.*"`, "oncall", "pagerduty"}},
		{name: "notify template that does not parse", code: 1, config: withNotify("{{ .DeviceID "),
			env: []string{"PD_KEY=https://hooks.example/" + pdKey}, want: []string{"notify.receivers[1].slack.text"}},
		{name: "notify secret written inline", code: 1,
			config: strings.Replace(withNotify("x"), `"${PD_KEY}"}}`, pdKey+"}}", 1), env: []string{"PD_KEY=https://hooks.example/x"},
			want: []string{"notify.receivers[0].pagerduty.routing_key: a secret is not written inline"}},
		{name: "unknown interval", code: 1, config: strings.Replace(schedulesConfig, "quiet: [night]", "quiet: [nite]", 1),
			want: []string{`types.solar.quiet: "nite" is not in time_intervals (defined: night)`}},
		{name: "bad cron", code: 1, config: strings.Replace(schedulesConfig, `"0 2 * * *"`, `"0 2 * *"`, 1),
			want: []string{`types.meter.schedule: "0 2 * *"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "missing.yaml")
			if tc.config != "" {
				path = filepath.Join(t.TempDir(), "heartbeatd.yaml")
				require.NoError(t, os.WriteFile(path, []byte(tc.config), 0o600))
			}
			code, stdout, stderr := runBinary(t, tc.env, "check-config", "-config", path)
			require.Equal(t, tc.code, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			shown := stdout
			if tc.code != 0 {
				shown = stderr
			}
			for _, w := range tc.want {
				require.Contains(t, shown, w)
			}
			for _, secret := range []string{redisPassword, httpToken, mqttPassword, amKey, pdKey} {
				require.NotContains(t, stdout+stderr, secret, "check-config printed a secret")
			}
		})
	}
}

func TestVersion(t *testing.T) {
	code, stdout, stderr := runBinary(t, nil, "version")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `^heartbeatd \S+ \(commit \S+, go1\.\d+[^,]*, \w+/\w+\)\n$`, stdout)
	require.Contains(t, stdout, runtime.Version())
}

func TestUnknownCommand(t *testing.T) {
	code, _, stderr := runBinary(t, nil, "frobnicate")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `unknown command "frobnicate"`)
	require.Contains(t, stderr, "Usage:")
}

// TestRunRefusesToStart: `heartbeatd run` on a bad config, or on an HTTP address already taken, exits 1
// at once with a message naming the cause, instead of running half-configured.
func TestRunRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte(regexp.MustCompile(`gateway: \{timeout: 30s`).ReplaceAllString(goodConfig, "gateway: {timeout: 0s")), 0o600))
	code, _, stderr := runBinary(t, nil, "run", "-config", bad)
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "types.gateway.timeout")
	require.NotContains(t, stderr, redisPassword)

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	good := filepath.Join(dir, "good.yaml")
	require.NoError(t, os.WriteFile(good, []byte(goodConfig), 0o600))
	code, _, stderr = runBinary(t, []string{"HEARTBEATD_HTTP_LISTEN=" + taken.Addr().String()}, "run", "-config", good)
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "http.listen")
}
