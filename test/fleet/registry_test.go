package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// send makes one HTTP request to replica i and returns the status and body.
func (e *env) send(i int, method, path, contentType, body string) (int, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.replicas[i].HTTP+path, strings.NewReader(body))
	require.NoError(e.t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return resp.StatusCode, string(b)
}

// first returns device's first event of kind (ok false when none yet).
func (e events) first(device string, kind event.Kind) (event.Event, bool) {
	for _, ev := range e.Of(device) {
		if ev.Kind == kind {
			return ev, true
		}
	}
	return event.Event{}, false
}

// TestRegistry: a registered device that never signals alarms one timeout after its registration; a
// device with its own 6 s timeout on a 3 s type alarms 6 s after its last signal, whichever replica wrote
// it; devices imported with a label form a correlated outage by that label; an import of many rows is
// timed (HB_IMPORT_ROWS, default 20000).
func TestRegistry(t *testing.T) {
	e := start(t, 2, `
types:
  default: {timeout: 3s, repeat_every: 0s}
  sensor:  {timeout: 2s, repeat_every: 0s}
  fast:    {timeout: 3s, repeat_every: 0s}
correlation: {by: [labels.site], min_devices: 50, window: 10s}
detection: {grace_after_outage: 500ms}
`)
	ctx := context.Background()

	registered := time.Now()
	code, body := e.send(0, "PUT", "/v1/devices/expected-1", "application/json", `{"device_type":"sensor"}`)
	require.Equal(t, 200, code, body)
	require.Contains(t, body, `"expected":true`)
	code, body = e.send(1, "PUT", "/v1/devices/slow-1", "application/json", `{"device_type":"fast","timeout":"6s"}`)
	require.Equal(t, 200, code, body)

	e.await(20*time.Second, func() bool { _, ok := e.events.first("expected-1", event.Interrupted); return ok },
		func() string { return "no interrupted for the registered device that never signalled" })
	ev, _ := e.events.first("expected-1", event.Interrupted)
	require.Equal(t, 2*time.Second, ev.Deadline.Sub(ev.LastSeen), "its own type's timeout")
	require.WithinDuration(t, registered, ev.LastSeen, time.Second, "timed from its registration")
	require.Equal(t, "sensor", ev.DeviceType)

	// Both replicas read every signal; the one that took the registration applies the override at once,
	// and deadlines only move forward, so the device's own timeout wins whichever writes first.
	require.NoError(t, e.fleet.once(ctx, []string{"slow-1"}, signal{typ: "fast"}))
	e.await(20*time.Second, func() bool { _, ok := e.events.first("slow-1", event.Interrupted); return ok },
		func() string { return "no interrupted for slow-1" })
	ev, _ = e.events.first("slow-1", event.Interrupted)
	require.Equal(t, 6*time.Second, ev.Deadline.Sub(ev.LastSeen), "its own timeout, not its type's 3s")
	require.Equal(t, "fast", ev.DeviceType)

	// An import: 60 devices at one site never signal → one outage of that site.
	var csv strings.Builder
	csv.WriteString("device_id,device_type,labels\n")
	site := testenv.DeviceIDs("berlin", 60)
	for _, d := range site {
		fmt.Fprintf(&csv, "%s,sensor,site=berlin;floor=1\n", d)
	}
	csv.WriteString("oslo-1,sensor,site=oslo\nbad id\x01,sensor,\n")
	code, body = e.send(0, "POST", "/v1/devices:import", "text/csv", csv.String())
	require.Equal(t, 200, code, body)
	var res struct{ Imported, Failed int }
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	require.Equal(t, 61, res.Imported, body)
	require.Equal(t, 1, res.Failed, body)
	group := []string{"outage:labels.site:berlin"}
	e.await(30*time.Second, func() bool { return e.events.count(group, event.OutageStarted) == 1 }, func() string {
		return fmt.Sprintf("no outage for labels.site=berlin; %d of 60 interrupted", e.events.count(site, event.Interrupted))
	})
	code, body = e.send(1, "GET", "/v1/devices?state=interrupted&label=site=oslo&limit=10000", "", "")
	require.Equal(t, 200, code, body)
	require.Contains(t, body, `"oslo-1"`)
	require.NotContains(t, body, strconv.Quote(site[0]))

	// A large import, timed.
	rows := 20000
	if v := os.Getenv("HB_IMPORT_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		rows = n
	}
	var nd strings.Builder
	for i := range rows {
		fmt.Fprintf(&nd, `{"device_id":"bulk-%07d","device_type":"default","labels":{"batch":"b%d"}}`+"\n", i, i%100)
	}
	began := time.Now()
	code, body = e.send(0, "POST", "/v1/devices:import", "application/x-ndjson", nd.String())
	took := time.Since(began)
	require.Equal(t, 200, code, body)
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	require.Equal(t, rows, res.Imported, body)
	t.Logf("import: %d rows (%.1f MB NDJSON) in %s, %.0f rows/s", rows, float64(nd.Len())/1e6, took.Round(time.Millisecond),
		float64(rows)/took.Seconds())
}
