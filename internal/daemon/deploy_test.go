package daemon

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"gopkg.in/yaml.v3"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// TestComposeDeployment runs heartbeatd with configs/compose.yaml against a mosquitto configured by
// deploy/mosquitto.conf and deploy/mosquitto.acl, its password file built the way docker-compose.yml
// builds it and secrets made by deploy/secrets/init.sh, and a one-broker Kafka with only the signal
// topic: anonymous clients are refused, heartbeatd logs in with the configured user, subscribes through
// the ACL, creates its topics and becomes ready, and its API wants the token.
func TestComposeDeployment(t *testing.T) {
	dir := t.TempDir()
	secrets := initSecrets(t, dir)
	broker := startDeployMosquitto(t, dir, secrets["mqtt-password"])

	anon := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(broker).SetClientID("anonymous").SetConnectRetry(false))
	tok := anon.Connect()
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.Error(t, tok.Error(), "deploy/mosquitto.conf must refuse anonymous clients")

	rdb := testenv.StartRedis(t)
	// As compose's kafka-topics service leaves it: the signal topic only; heartbeatd creates its own.
	kafka := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{"device-signals"}})
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	env := map[string]string{
		"HEARTBEATD_REDIS_ADDRS":               rdb.Addr,
		"HEARTBEATD_INGEST_MQTT_BROKERS":       broker,
		"HEARTBEATD_INGEST_KAFKA_BROKERS":      strings.Join(kafka.Addrs, ","),
		"HEARTBEATD_EVENTS_KAFKA_BROKERS":      strings.Join(kafka.Addrs, ","),
		"HEARTBEATD_HTTP_LISTEN":               httpAddr,
		"HEARTBEATD_HTTP_TOKEN_FILE":           filepath.Join(dir, "api-token"),
		"HEARTBEATD_INGEST_MQTT_PASSWORD_FILE": filepath.Join(dir, "mqtt-password"),
		// docker-compose.yml's named tokens, their secrets where init.sh made them.
		"HEARTBEATD_HTTP_TOKENS": strings.ReplaceAll(composeEnv(t, "heartbeatd", "HEARTBEATD_HTTP_TOKENS"), "/run/secrets/", dir+"/"),
	}
	warnings, logs := observer.New(zap.WarnLevel)
	logger := zaptest.NewLogger(t, zaptest.WrapOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return zapcore.NewTee(c, warnings) })))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{ConfigPath: filepath.Join("..", "..", "configs", "compose.yaml"), Build: BuildInfo{Version: "test"},
			Env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }, Logger: logger, Reload: make(chan struct{})})
	}()

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	get := func(path, token string) int {
		req, err := newRequest(http.MethodGet, "http://"+httpAddr+path, token, nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	ended := false
	var runErr error
	require.Eventually(t, func() bool {
		select {
		case runErr = <-done:
			ended = true
			return true
		default:
		}
		return get("/readyz", "") == http.StatusOK
	}, 60*time.Second, 50*time.Millisecond, "ready: logged in to mosquitto, Redis and Kafka reached")
	require.False(t, ended, "Run ended before it was ready: %v", runErr)
	insecure := logs.FilterMessage("insecure setting").All()
	require.Len(t, insecure, 1, "warned once, at start")
	require.Equal(t, "ingest.mqtt.brokers[0]", insecure[0].ContextMap()["key"], "the MQTT password goes over plaintext")
	require.Equal(t, http.StatusUnauthorized, get("/v1/stats", ""))
	require.Equal(t, http.StatusOK, get("/v1/stats", secrets["api-token"]))
	require.Equal(t, http.StatusOK, get("/v1/stats", secrets["api-token-wall"]), "the wall screen's token reads")
	req, err := newRequest(http.MethodPost, "http://"+httpAddr+"/v1/silences", secrets["api-token-wall"], strings.NewReader(`{"device_type":"default","for":"1h"}`))
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "and only reads")

	cancel()
	awaitReturn(t, done)

	// A password in the broker URL that mosquitto refuses: the error names the broker, not the password.
	all, allLogs := observer.New(zap.DebugLevel)
	env["HEARTBEATD_INGEST_MQTT_BROKERS"] = strings.Replace(broker, "tcp://", "tcp://heartbeatd:wrong-pw-4711@", 1)
	err = Run(context.Background(), Options{ConfigPath: filepath.Join("..", "..", "configs", "compose.yaml"), Build: BuildInfo{Version: "test"},
		Env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }, Logger: zap.New(all), Reload: make(chan struct{})})
	require.Error(t, err)
	require.Contains(t, err.Error(), "heartbeatd:redacted@127.0.0.1")
	require.Contains(t, err.Error(), "not Authorized")
	require.NotContains(t, err.Error(), "wrong-pw-4711")
	for _, e := range allLogs.All() {
		line := e.Message
		for k, v := range e.ContextMap() {
			line += fmt.Sprintf(" %s=%v", k, v)
		}
		require.NotContains(t, line, "wrong-pw-4711")
	}
}

// TestCheckConfigWarns: check-config shows what `run` would warn about, here compose.yaml's MQTT
// password on the plaintext compose network.
func TestCheckConfigWarns(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef\n"), 0o600))
	env := map[string]string{"HEARTBEATD_HTTP_TOKEN_FILE": secret, "HEARTBEATD_INGEST_MQTT_PASSWORD_FILE": secret}
	out, err := CheckConfig(filepath.Join("..", "..", "configs", "compose.yaml"), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	require.Contains(t, out, "\nwarning: ingest.mqtt.brokers[0]: \"tcp://mosquitto:1883\" is plaintext")
	out, err = CheckConfig(filepath.Join("..", "..", "configs", "heartbeatd.yaml"), nil)
	require.NoError(t, err)
	require.NotContains(t, out, "warning")
}

// TestCheckConfigNamesDeprecatedKeys: a key still read under its old name is shown by check-config, the
// command an upgrade is checked with (docs/operations.md#upgrades), not only logged by `run`.
func TestCheckConfigNamesDeprecatedKeys(t *testing.T) {
	ref, err := os.ReadFile(filepath.Join("..", "..", "configs", "heartbeatd.yaml"))
	require.NoError(t, err)
	require.Contains(t, string(ref), "\ndetection:\n")
	path := filepath.Join(t.TempDir(), "heartbeatd.yaml")
	old := strings.Replace(string(ref), "\ndetection:\n", "\ndetection:\n  lag_threshold: 2s\n", 1)
	require.NoError(t, os.WriteFile(path, []byte(old), 0o600))
	out, err := CheckConfig(path, nil)
	require.NoError(t, err)
	require.Contains(t, out, "\nwarning: detection.lag_threshold: deprecated name of ingest.max_lag (now 2s): write ingest.max_lag instead")
}

// initSecrets runs deploy/secrets/init.sh on a copy in dir and checks what it made: random hex secrets,
// readable by the containers' users, kept on a second run.
func initSecrets(t *testing.T, dir string) map[string]string {
	t.Helper()
	script, err := os.ReadFile(filepath.Join("..", "..", "deploy", "secrets", "init.sh"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "init.sh"), script, 0o755))
	run := func() {
		out, err := exec.Command("sh", filepath.Join(dir, "init.sh")).CombinedOutput()
		require.NoError(t, err, string(out))
	}
	run()
	out := map[string]string{}
	for _, name := range []string{"api-token", "api-token-wall", "mqtt-password"} {
		p := filepath.Join(dir, name)
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{64}$`), string(b), name)
		st, err := os.Stat(p)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o644), st.Mode().Perm(), name)
		out[name] = string(b)
	}
	run()
	for name, v := range out {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		require.Equal(t, v, string(b), "a second run keeps %s", name)
	}
	return out
}

// startDeployMosquitto runs mosquitto with deploy/mosquitto.conf, its container paths and listener moved
// into dir and onto a free loopback port, and a password file for "heartbeatd" made with
// mosquitto_passwd as docker-compose.yml makes it. It returns the broker URL.
func startDeployMosquitto(t *testing.T, dir, password string) string {
	t.Helper()
	bin, err := testenv.LookPath("mosquitto")
	if err != nil {
		testenv.Need(t, "mosquitto", err)
	}
	passwdBin, err := testenv.LookPath("mosquitto_passwd")
	if err != nil {
		testenv.Need(t, "mosquitto_passwd", err)
	}
	passwd := filepath.Join(dir, "passwd")
	out, err := exec.Command(passwdBin, "-c", "-b", passwd, "heartbeatd", password).CombinedOutput()
	require.NoError(t, err, string(out))

	conf, err := os.ReadFile(filepath.Join("..", "..", "deploy", "mosquitto.conf"))
	require.NoError(t, err)
	acl, err := filepath.Abs(filepath.Join("..", "..", "deploy", "mosquitto.acl"))
	require.NoError(t, err)
	port := testenv.FreePort(t)
	moved := map[string]string{
		"listener":             fmt.Sprintf("listener %d 127.0.0.1", port),
		"password_file":        "password_file " + passwd,
		"acl_file":             "acl_file " + acl,
		"persistence_location": "persistence_location " + dir + "/",
		"log_dest":             "log_dest stderr",
	}
	var lines []string
	if os.Geteuid() == 0 {
		lines = append(lines, "user root") // the mosquitto user could not read the test's directory
	}
	seen := map[string]bool{}
	for _, l := range strings.Split(string(conf), "\n") {
		key, _, _ := strings.Cut(l, " ")
		if r, ok := moved[key]; ok {
			l, seen[key] = r, true
		}
		lines = append(lines, l)
	}
	for key := range moved {
		require.True(t, seen[key], "deploy/mosquitto.conf no longer sets %s", key)
	}
	require.Contains(t, string(conf), "\nallow_anonymous false\n")
	confPath := filepath.Join(dir, "mosquitto.conf")
	require.NoError(t, os.WriteFile(confPath, []byte(strings.Join(lines, "\n")), 0o600))

	logf, err := os.Create(filepath.Join(dir, "mosquitto.log"))
	require.NoError(t, err)
	defer logf.Close()
	cmd := exec.Command(bin, "-c", confPath)
	cmd.Stdout, cmd.Stderr, cmd.SysProcAttr = logf, logf, testenv.SysProcAttr()
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	up := func() bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
	require.Eventually(t, func() bool {
		select {
		case <-exited:
			return true
		default:
			return up()
		}
	}, 10*time.Second, 10*time.Millisecond)
	select {
	case <-exited:
		b, _ := os.ReadFile(filepath.Join(dir, "mosquitto.log"))
		t.Fatalf("mosquitto exited:\n%s", b)
	default:
	}
	return "tcp://" + addr
}

// composeEnv is the environment variable name of service in docker-compose.yml.
func composeEnv(t *testing.T, service, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docker-compose.yml"))
	require.NoError(t, err)
	var compose struct {
		Services map[string]struct{ Environment map[string]string }
	}
	require.NoError(t, yaml.Unmarshal(b, &compose))
	v, ok := compose.Services[service].Environment[name]
	require.True(t, ok, "docker-compose.yml sets %s for %s", name, service)
	return v
}
