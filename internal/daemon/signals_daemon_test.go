package daemon

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// signalDaemon is one heartbeatd run in-process on redis-server and Kafka (kfake; its signals topic is
// read too), with a signal token
// ("meters-secret") and a read token ("viewer-secret"), and timeouts of an hour: a device signalled
// over HTTP stays online for the whole test.
type signalDaemon struct {
	base  string
	kafka *testenv.Kafka
}

func startSignalDaemon(t *testing.T) *signalDaemon {
	t.Helper()
	rdb := testenv.StartRedis(t)
	kafka := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{testenv.SignalsTopic, testenv.EventsTopic, testenv.DeadLetterTopic}})
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	digest := func(secret string) string { return fmt.Sprintf("%x", sha256.Sum256([]byte(secret))) }
	path := filepath.Join(t.TempDir(), "heartbeatd.yaml")
	servers := testenv.KafkaReplicaConfig{Redis: rdb.Addr, Slots: 4, Kafka: kafka.Addrs, Replica: "http"}
	require.NoError(t, os.WriteFile(path, []byte(servers.YAML(fmt.Sprintf(`
types:
  default: {timeout: 1h, repeat_every: 1h}
http:
  listen: %q
  tokens:
    - {name: meters, role: signal, token_sha256: %s}
    - {name: viewer, role: read, token_sha256: %s}
shutdown_timeout: %s
`, httpAddr, digest("meters-secret"), digest("viewer-secret"), shutdownTimeout))), 0o600))
	startDaemon(t, path)
	d := &signalDaemon{base: "http://" + httpAddr, kafka: kafka}
	awaitReadyz(t, d.base)
	return d
}

// onlineDevices lists the devices the API shows online.
func (d *signalDaemon) onlineDevices(t *testing.T) map[string]bool {
	t.Helper()
	code, out := callJSON(t, d.base, "GET", "/v1/devices?state=online&limit=10000", "viewer-secret", "")
	require.Equal(t, http.StatusOK, code, "%v", out)
	online := map[string]bool{}
	for _, v := range out["devices"].([]any) {
		dev := v.(map[string]any)
		if dev["state"] == "online" {
			online[dev["device_id"].(string)] = true
		}
	}
	return online
}

// A batch posted over HTTP mixes good and bad lines: when the answer comes every good signal is in
// Redis (the API shows the device online), every bad one is listed by index and reason and reaches the
// dead-letter topic with source http, and the ingest metrics count them under source http.
func TestHTTPSignalBatchOnRealServers(t *testing.T) {
	d := startSignalDaemon(t)
	var body strings.Builder
	wantBad := map[int]string{}
	badLines := []struct{ line, reason string }{
		{`{"device_id":"broken-`, ingest.ReasonMalformedJSON},
		{`{"type":"meter"}`, ingest.ReasonNoDeviceID},
		{`{"device_id":"x","ts":"yesterday"}`, ingest.ReasonBadTS},
		{`"just a string"`, ingest.ReasonMalformedJSON},
		{`{"device_id":"a` + "\\u0007" + `"}`, ingest.ReasonInvalidDeviceID},
	}
	good := map[string]bool{}
	for i := range 1000 {
		if i%10 == 3 {
			bad := badLines[(i/10)%len(badLines)]
			wantBad[i] = bad.reason
			body.WriteString(bad.line + "\n")
			continue
		}
		id := fmt.Sprintf("http-%03d", i)
		good[id] = true
		fmt.Fprintf(&body, `{"device_id":%q,"ts":%d}`+"\n", id, time.Now().UnixMilli())
	}
	code, out := callJSON(t, d.base, "POST", "/v1/signals", "meters-secret", body.String())
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.EqualValues(t, len(good), out["accepted"])
	gotBad := map[int]string{}
	for _, b := range out["bad"].([]any) {
		e := b.(map[string]any)
		gotBad[int(e["index"].(float64))] = e["reason"].(string)
	}
	require.Equal(t, wantBad, gotBad)
	require.Equal(t, good, d.onlineDevices(t), "every good signal is stored when the answer comes")

	dead := d.kafka.ReadUntil(t, testenv.DeadLetterTopic, 30*time.Second, func(recs []testenv.Record) bool { return len(recs) >= len(wantBad) })
	require.Len(t, dead, len(wantBad))
	reasons := map[string]int{}
	for _, r := range dead {
		dl, err := event.DecodeDeadLetter(r.Value)
		require.NoError(t, err)
		assert.Equal(t, ingest.SourceHTTP, dl.Source)
		assert.Equal(t, "/v1/signals", dl.Topic)
		reasons[dl.Reason]++
	}
	want := map[string]int{}
	for _, r := range wantBad {
		want[r]++
	}
	require.Equal(t, want, reasons)

	// A JSON array and the one-device route take the same path.
	code, out = callJSON(t, d.base, "POST", "/v1/signals", "meters-secret", `[{"device_id":"arr-1"}, {"device_id":7}, {"device_id":"arr-2","type":"meter"}]`)
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.EqualValues(t, 2, out["accepted"])
	require.Equal(t, []any{map[string]any{"index": 1.0, "reason": ingest.ReasonInvalidDeviceID}}, out["bad"])
	resp, raw := request(t, d.base, "POST", "/v1/devices/cron-backup/signal", "meters-secret", "")
	require.Equal(t, http.StatusNoContent, resp.StatusCode, "%s", raw)
	online := d.onlineDevices(t)
	for _, id := range []string{"arr-1", "arr-2", "cron-backup"} {
		assert.True(t, online[id], "%s stored", id)
	}

	_, metrics := request(t, d.base, "GET", "/metrics", "", "")
	assert.Contains(t, string(metrics), fmt.Sprintf(`heartbeatd_signals_total{result="applied",source="http"} %d`, len(good)+3))
	assert.Contains(t, string(metrics), fmt.Sprintf(`heartbeatd_signals_total{result="deadletter",source="http"} %d`, len(wantBad)+1))
}

// The hostile requests get a clear refusal, and nothing of a refused batch is stored: no token (401), a
// token without the signal role (403 naming it), 10,001 signals, a body over 8 MiB whether announced or
// streamed (413). A streamed body of 100 MiB is not read much past the limit: memory stays bounded.
func TestHTTPSignalsRefusedOnRealServers(t *testing.T) {
	d := startSignalDaemon(t)
	code, out := callJSON(t, d.base, "POST", "/v1/signals", "", `{"device_id":"a"}`)
	require.Equal(t, http.StatusUnauthorized, code, "%v", out)
	code, out = callJSON(t, d.base, "POST", "/v1/devices/a/signal", "viewer-secret", "")
	require.Equal(t, http.StatusForbidden, code, "%v", out)
	require.Contains(t, out["error"], "needs the signal role")

	var over strings.Builder
	for i := range ingest.MaxBatchSignals + 1 {
		fmt.Fprintf(&over, `{"device_id":"over-%d"}`+"\n", i)
	}
	code, out = callJSON(t, d.base, "POST", "/v1/signals", "meters-secret", over.String())
	require.Equal(t, http.StatusRequestEntityTooLarge, code, "%v", out)
	require.Contains(t, out["error"], "more than 10000 signals")
	code, out = callJSON(t, d.base, "POST", "/v1/signals", "meters-secret", strings.Repeat(" ", ingest.MaxBatchBytes+1))
	require.Equal(t, http.StatusRequestEntityTooLarge, code, "%v", out)
	require.Contains(t, out["error"], "larger than 8388608 bytes")

	// Streamed, without a length: the server stops reading at the limit.
	stream := &countingReader{left: 100 << 20}
	req, err := newRequest("POST", d.base+"/v1/signals", "meters-secret", stream)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	if err == nil { // or the server closed the connection while the client still wrote: as good a refusal
		raw, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%s", raw)
	}
	require.Less(t, stream.read.Load(), int64(32<<20), "the server read far past its 8 MiB limit")

	code, out = callJSON(t, d.base, "GET", "/v1/devices?limit=10000", "viewer-secret", "")
	require.Equal(t, http.StatusOK, code)
	require.Empty(t, out["devices"], "nothing of a refused batch is stored")
}

// countingReader yields left bytes of valid NDJSON signals and counts what was read (the transport may
// still be writing when the answer came: read is atomic).
type countingReader struct {
	left int64
	read atomic.Int64
	line []byte
}

func (r *countingReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	if r.line == nil {
		r.line, _ = json.Marshal(map[string]string{"device_id": "stream-1"})
		r.line = append(r.line, '\n')
	}
	n := 0
	for n < len(p) && r.left > 0 {
		c := copy(p[n:min(len(p), n+int(r.left))], r.line)
		n += c
		r.left -= int64(c)
	}
	r.read.Add(int64(n))
	return n, nil
}
