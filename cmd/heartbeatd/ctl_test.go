package main_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// ctlFleet is the real heartbeatd on real servers with four tokens: admin (http.token), ops (operate,
// from a file), viewer (read, as a digest) and berlin (read, scoped to labels.site=berlin).
type ctlFleet struct {
	hb                                    *testenv.Heartbeatd
	adminEnv, opsFile, viewEnv, berlinEnv string
}

const (
	ctlAdminToken  = "ctl-admin-5e1a"
	ctlOpsToken    = "ctl-ops-90b4"
	ctlViewerToken = "ctl-viewer-c33d"
	ctlBerlinToken = "ctl-berlin-7a02"
)

func startCtlFleet(t *testing.T) *ctlFleet {
	t.Helper()
	redis, broker := testenv.StartRedis(t), testenv.StartMosquitto(t)
	kafka := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{"heartbeat.events", "heartbeat.deadletter"}})
	opsFile := filepath.Join(t.TempDir(), "ops-token")
	require.NoError(t, os.WriteFile(opsFile, []byte(ctlOpsToken+"\n"), 0o600))
	sum, berlinSum := sha256.Sum256([]byte(ctlViewerToken)), sha256.Sum256([]byte(ctlBerlinToken))
	servers := testenv.HeartbeatdConfig{Redis: redis.Addr, Slots: 4, MQTT: broker.Addr, ClientID: "ctl-test", Kafka: kafka.Addrs}
	hb := testenv.StartHeartbeatd(t, testenv.HeartbeatdOptions{Config: servers.YAML(fmt.Sprintf(`
types:
  default: {timeout: 1s, repeat_every: 1h}
detection: {grace_after_outage: 100ms}
shutdown_timeout: 5s
time_intervals:
  - {name: always, time_intervals: [{times: [{start_time: "00:00", end_time: "24:00"}]}]}
http:
  token: %s
  tokens:
    - {name: ops, role: operate, token_file: %s}
    - {name: viewer, role: read, token_sha256: %s}
    - {name: berlin, role: read, token_sha256: %s, scope: labels.site=berlin}
`, ctlAdminToken, opsFile, hex.EncodeToString(sum[:]), hex.EncodeToString(berlinSum[:])))})
	require.NoError(t, hb.AwaitReady(context.Background(), 30*time.Second), hb.LogTail())
	return &ctlFleet{hb: hb, adminEnv: "HEARTBEATD_TOKEN=" + ctlAdminToken, opsFile: opsFile, viewEnv: "HEARTBEATD_TOKEN=" + ctlViewerToken,
		berlinEnv: "HEARTBEATD_TOKEN=" + ctlBerlinToken}
}

// ctl runs `heartbeatd ctl` with the fleet's URL in HEARTBEATD_URL.
func (f *ctlFleet) ctl(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	return runBinary(t, append([]string{"HEARTBEATD_URL=" + f.hb.HTTP}, env...), append([]string{"ctl"}, args...)...)
}

// importCSV imports rows (a CSV's lines after its device_id,labels header) as the admin, and returns
// what ctl printed.
func (f *ctlFleet) importCSV(t *testing.T, rows string) string {
	t.Helper()
	csv := filepath.Join(t.TempDir(), "devices.csv")
	require.NoError(t, os.WriteFile(csv, []byte("device_id,labels\n"+rows), 0o600))
	code, out, errOut := f.ctl(t, []string{f.adminEnv}, "import", csv)
	require.Equal(t, 0, code, errOut)
	return out
}

// column is where each header word starts in a table's first line; every row's cells start there too.
func assertAligned(t *testing.T, table string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	require.GreaterOrEqual(t, len(lines), 2, table)
	var starts []int
	for i, r := range lines[0] {
		if r != ' ' && (i == 0 || lines[0][i-1] == ' ' && i >= 2 && lines[0][i-2] == ' ') {
			starts = append(starts, i)
		}
	}
	for _, l := range lines[1:] {
		for _, s := range starts[1:] {
			require.Greater(t, len(l), s, "%q is shorter than its header", l)
			assert.Equal(t, "  ", l[s-2:s], "a cell starts at column %d in %q:\n%s", s, l, table)
		}
	}
}

// An operator drives heartbeatd from a terminal: imports devices, lists the interrupted ones, acks
// one, silences another, ends the silence; each role gets exactly what it may, and a refusal exits 1
// with the server's message.
func TestCtl(t *testing.T) {
	f := startCtlFleet(t)
	assert.Contains(t, f.importCSV(t, "m-1,site=berlin\nm-2,site=paris\nbad id\x01,\n"), "imported 2, failed 1")

	// The registered devices never signal: with a 1s timeout they are interrupted a second later.
	require.Eventually(t, func() bool {
		code, out, _ := f.ctl(t, []string{f.viewEnv}, "-o", "json", "devices", "ls", "--state", "interrupted")
		var page struct{ Devices []struct{ DeviceID string } }
		return code == 0 && json.Unmarshal([]byte(out), &page) == nil && len(page.Devices) == 2
	}, 30*time.Second, 200*time.Millisecond)
	code, out, errOut := f.ctl(t, []string{f.viewEnv}, "devices", "ls", "--state", "interrupted")
	require.Equal(t, 0, code, errOut)
	assert.True(t, strings.HasPrefix(out, "DEVICE "), out)
	assert.Contains(t, out, "m-1")
	assertAligned(t, out)

	// A read token cannot ack: exit 1 with the server's message and status.
	code, _, errOut = f.ctl(t, []string{f.viewEnv}, "ack", "m-1")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, `POST /v1/devices/{id}/ack needs the operate role; token "viewer" has read (HTTP 403 Forbidden)`)
	code, _, errOut = f.ctl(t, nil, "devices", "get", "m-1")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "missing or wrong bearer token (HTTP 401 Unauthorized)")

	// The ops token, from a file, flags after the command.
	code, out, errOut = f.ctl(t, nil, "ack", "m-1", "--note", "on site", "--token-file", f.opsFile)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "acked m-1\n", out)
	code, out, errOut = f.ctl(t, nil, "--token-file", f.opsFile, "-o", "json", "devices", "get", "m-1")
	require.Equal(t, 0, code, errOut)
	var dev struct {
		State string
		Acked bool
	}
	require.NoError(t, json.Unmarshal([]byte(out), &dev), out)
	assert.Equal(t, "interrupted", dev.State)
	assert.True(t, dev.Acked, "the ack reached the server")

	code, out, errOut = f.ctl(t, nil, "--token-file", f.opsFile, "silence", "add", "--device", "m-2", "--for", "2h", "--comment", "battery")
	require.Equal(t, 0, code, errOut)
	id := strings.Fields(out)[1]
	code, out, errOut = f.ctl(t, []string{f.viewEnv}, "silence", "ls")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, id)
	assert.Contains(t, out, "device m-2")
	assert.Contains(t, out, "ops", "the silence names the token that made it")
	assertAligned(t, out)
	code, _, errOut = f.ctl(t, nil, "--token-file", f.opsFile, "silence", "end", id)
	require.Equal(t, 0, code, errOut)
	code, _, errOut = f.ctl(t, nil, "--token-file", f.opsFile, "silence", "end", id)
	assert.Equal(t, 1, code, "an ended silence is gone")
	assert.Contains(t, errOut, "no such silence (HTTP 404 Not Found)")

	// Fleet views.
	code, out, errOut = f.ctl(t, []string{f.viewEnv}, "stats")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `(?m)^interrupted\s+2$`, out)
	code, out, errOut = f.ctl(t, []string{f.viewEnv}, "advice")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "TYPE")
	assert.Regexp(t, `(?m)^default\s+1s\s`, out)
	code, out, errOut = f.ctl(t, []string{f.viewEnv}, "outages", "ls")
	require.Equal(t, 0, code, errOut)
	assert.True(t, strings.HasPrefix(out, "ID "), out)

	// A signal from the terminal, as a cron job would send it; a read token may not.
	code, out, errOut = f.ctl(t, []string{f.adminEnv}, "signal", "m-3", "--type", "default")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "signalled m-3\n", out)
	code, out, errOut = f.ctl(t, []string{f.viewEnv}, "-o", "json", "devices", "get", "m-3")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `"device_id": "m-3"`, "the signal is stored when ctl returns")
	code, _, errOut = f.ctl(t, []string{f.viewEnv}, "signal", "m-3")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "needs the signal role")

	// Mistakes on the command line exit 2; a server that does not answer exits 1.
	code, _, errOut = f.ctl(t, nil, "silence", "add", "--device", "m-2")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "give --device, --type or --matcher (not both --device and --type), and --for, --until or --interval")
	code, _, _ = f.ctl(t, nil, "frobnicate")
	assert.Equal(t, 2, code)
	code, _, errOut = runBinary(t, []string{"HEARTBEATD_URL=http://127.0.0.1:1"}, "ctl", "stats")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "connection refused")
}

// An operator silences by matchers, recurring inside a configured interval: the server stores what the
// flags said, the device it selects shows silenced, and a mistake in a matcher or an interval name is
// refused with a clear message.
func TestCtlSilenceMatchersAndIntervals(t *testing.T) {
	f := startCtlFleet(t)
	f.importCSV(t, "m-1,site=berlin\nm-2,site=paris\n")

	code, out, errOut := f.ctl(t, nil, "--token-file", f.opsFile, "silence", "add", "--type", "default",
		"--matcher", "labels.site=~ber.*", "--matcher", "device_id!=m-9", "--interval", "always", "--comment", "berlin nights")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `^silence \S+ during always, until deleted\n$`, out)
	code, out, errOut = f.ctl(t, nil, "--token-file", f.opsFile, "-o", "json", "silence", "add",
		"--matcher", "device_id=m-2", "--interval", "always", "--for", "2h")
	require.Equal(t, 0, code, errOut)
	var byID struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(out), &byID), out)

	code, out, errOut = f.ctl(t, []string{f.viewEnv}, "-o", "json", "silence", "ls")
	require.Equal(t, 0, code, errOut)
	var listed struct {
		Silences []struct {
			DeviceType    string `json:"device_type"`
			Matchers      []map[string]string
			TimeIntervals []string `json:"time_intervals"`
			Ends          time.Time
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &listed), out)
	require.Len(t, listed.Silences, 2, out)
	byType := listed.Silences[0]
	if byType.DeviceType == "" {
		byType = listed.Silences[1]
	}
	assert.Equal(t, []map[string]string{{"label": "site", "op": "=~", "value": "ber.*"}, {"label": "device_id", "op": "!=", "value": "m-9"}}, byType.Matchers)
	assert.Equal(t, []string{"always"}, byType.TimeIntervals)
	assert.Equal(t, 9999, byType.Ends.Year(), "a recurring silence without an end lasts until deleted")
	code, out, errOut = f.ctl(t, []string{f.viewEnv}, "silence", "ls")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `type default, site=~"ber.*", device_id!="m-9"`)
	assert.Contains(t, out, "during always, until deleted")
	assertAligned(t, out)

	// The device_id matcher needs no labels, so the device view shows it silenced inside "always".
	require.Eventually(t, func() bool {
		code, out, _ := f.ctl(t, []string{f.viewEnv}, "-o", "json", "devices", "get", "m-2")
		var d struct {
			SilencedUntil *time.Time `json:"silenced_until"`
		}
		return code == 0 && json.Unmarshal([]byte(out), &d) == nil && d.SilencedUntil != nil && d.SilencedUntil.After(time.Now())
	}, 10*time.Second, 100*time.Millisecond, "m-2 silenced by its matcher inside the interval")
	code, _, errOut = f.ctl(t, nil, "--token-file", f.opsFile, "silence", "end", byID.ID)
	require.Equal(t, 0, code, errOut)

	code, _, errOut = f.ctl(t, nil, "--token-file", f.opsFile, "silence", "add", "--matcher", "labels.site=berlin", "--interval", "weekends")
	assert.Equal(t, 1, code, "an interval the configuration does not define is the server's 400")
	assert.Contains(t, errOut, `"weekends" is not in the configuration's time_intervals`)
	assert.Contains(t, errOut, "HTTP 400")
	code, _, errOut = f.ctl(t, nil, "--token-file", f.opsFile, "silence", "add", "--matcher", "labels.site~berlin", "--for", "1h")
	assert.Equal(t, 2, code, "a matcher without an op is a command-line mistake")
	assert.Contains(t, errOut, `--matcher: matcher "labels.site~berlin"`)
	code, _, errOut = f.ctl(t, nil, "--token-file", f.opsFile, "silence", "add", "--matcher", "site=berlin")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "and --for, --until or --interval")

	// A scoped token's stats name its scope and no fleet counts (docs/access.md#scopes).
	code, out, errOut = f.ctl(t, []string{f.berlinEnv}, "stats")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `(?m)^scope\s+labels\.site=berlin$`, out)
	assert.NotContains(t, out, "interrupted")
}

// check-config lists the API's tokens by name, role and scope, and where each secret comes from, never
// the secret nor the digest of a secret kept in a file.
func TestCheckConfigShowsTokens(t *testing.T) {
	dir := t.TempDir()
	opsFile := filepath.Join(dir, "ops-token")
	require.NoError(t, os.WriteFile(opsFile, []byte(ctlOpsToken+"\n"), 0o600))
	viewerSum := sha256.Sum256([]byte(ctlViewerToken))
	opsSum := sha256.Sum256([]byte(ctlOpsToken))
	path := filepath.Join(dir, "heartbeatd.yaml")
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(goodConfig, `http: {token: "`+httpToken+`"}`, fmt.Sprintf(`
http:
  token: %s
  tokens:
    - {name: ops, role: operate, token_file: %s}
    - {name: berlin, role: read, token_sha256: %s, scope: labels.site=berlin}
`, httpToken, opsFile, hex.EncodeToString(viewerSum[:])), 1)), 0o600))
	code, stdout, stderr := runBinary(t, nil, "check-config", "-config", path)
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `(?m)^NAME\s+ROLE\s+SCOPE\s+SECRET$`, stdout)
	assert.Regexp(t, `(?m)^http\.token\s+admin\s+whole fleet\s+http\.token$`, stdout)
	assert.Regexp(t, `(?m)^ops\s+operate\s+whole fleet\s+token_file `+regexp.QuoteMeta(opsFile)+`$`, stdout)
	assert.Regexp(t, `(?m)^berlin\s+read\s+labels\.site=berlin\s+token_sha256$`, stdout)
	for _, secret := range []string{httpToken, ctlOpsToken, hex.EncodeToString(opsSum[:])} {
		assert.NotContains(t, stdout+stderr, secret)
	}
}
