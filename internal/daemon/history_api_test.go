package daemon

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// An incident the daemon detects, an operator acks over the API and the device ends by signalling is in
// the device's history with the fields each of those steps set, on the device's view as availability, and
// in the groups' availability; a scoped token sees its own group alone; a deleted device's history is gone.
func TestIncidentHistoryThroughTheDaemon(t *testing.T) {
	dir := t.TempDir()
	metersFile := filepath.Join(dir, "meters-token")
	require.NoError(t, os.WriteFile(metersFile, []byte("meters-secret\n"), 0o600))
	d := startActsDaemonWith(t, fmt.Sprintf(", token: admin-secret, tokens: [{name: meters, role: read, scope: device_type=meter, token_file: %s}]",
		metersFile), "admin-secret")
	d.signal("h-1", "meter")
	d.signal("h-2", "")
	all := d.await("both interrupt", is(event.Interrupted, "h-1"), is(event.Interrupted, "h-2"))
	opening := only(t, all, event.Interrupted, "h-1")
	require.Eventually(t, func() bool { // counted once recorded, from what the incidents say: no walk
		stats := d.call("GET", "/v1/stats?group_by=device_type", "", http.StatusOK)
		byGroup, _ := stats["by_group"].(map[string]any)
		return assert.ObjectsAreEqual(map[string]any{"meter": 1.0, "default": 1.0}, byGroup["interrupted"])
	}, 10*time.Second, 20*time.Millisecond)

	d.call("POST", "/v1/devices/h-1/ack", `{"by":"alice"}`, http.StatusOK)
	d.await("the ack", is(event.Acked, "h-1"))
	d.signal("h-1", "meter")
	// Back, h-1 keeps signalling: its list then holds the one incident however long after the
	// events the history records them.
	stopBeats := make(chan struct{})
	defer close(stopBeats)
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopBeats:
				return
			case <-tick.C:
				d.device.Publish("devices/h-1/heartbeat", 1, false, `{"type":"meter"}`)
			}
		}
	}()
	all = d.await("h-1 recovers", is(event.Recovered, "h-1"))
	recovered := only(t, all, event.Recovered, "h-1")

	var list map[string]any
	require.Eventually(t, func() bool { // recorded from the events topic a moment later: await its close
		list = d.call("GET", "/v1/devices/h-1/incidents", "", http.StatusOK)
		in := list["incidents"].([]any)
		return len(in) == 1 && in[0].(map[string]any)["closed"] != nil
	}, 10*time.Second, 20*time.Millisecond)
	in := list["incidents"].([]any)[0].(map[string]any)
	assert.Equal(t, opening.ID, in["id"])
	assert.Equal(t, "interrupted", in["first_kind"])
	assert.Equal(t, "alice", in["acked"].(map[string]any)["by"])
	assert.InDelta(t, float64(recovered.LastSeen.UnixMilli()+recovered.SilentForMs-opening.Deadline.UnixMilli()), in["down_ms"], 0)
	assert.Empty(t, list["next_cursor"])

	view := d.call("GET", "/v1/devices/h-1", "", http.StatusOK)
	assert.Equal(t, float64(1), view["incidents_30d"])
	avail := view["availability"].(map[string]any)
	assert.Less(t, avail["24h"], 1.0, "it was down for part of the time it was known")
	assert.Greater(t, avail["24h"], 0.0)

	byType := d.call("GET", "/v1/availability?window=24h&group_by=device_type", "", http.StatusOK)
	var values []string
	for _, g := range byType["groups"].([]any) {
		values = append(values, g.(map[string]any)["value"].(string))
	}
	assert.Equal(t, []string{"default", "meter"}, values)

	// The fleet's availability counts every device of it: h-3, registered and never down, too.
	d.call("PUT", "/v1/devices/h-3", `{"timeout":"1h"}`, http.StatusOK)
	fleet := d.call("GET", "/v1/availability?window=24h", "", http.StatusOK)["groups"].([]any)
	require.Len(t, fleet, 1)
	whole := fleet[0].(map[string]any)
	assert.Equal(t, 3.0, whole["devices"], "h-1, h-2 and h-3, which had no incident")
	assert.InDelta(t, 1-whole["down_ms"].(float64)/float64(3*24*time.Hour.Milliseconds()), whole["availability"], 1e-9)

	d.token = "meters-secret"
	own := d.call("GET", "/v1/stats?group_by=device_type", "", http.StatusOK)["by_group"].(map[string]any)
	assert.Equal(t, map[string]any{"meter": 0.0}, own["interrupted"], "its own group alone; h-1 recovered")
	d.call("GET", "/v1/stats?group_by=label.site", "", http.StatusBadRequest)
	scoped := d.call("GET", "/v1/availability", "", http.StatusOK)
	require.Len(t, scoped["groups"], 1)
	assert.Equal(t, "meter", scoped["groups"].([]any)[0].(map[string]any)["value"])
	d.call("GET", "/v1/availability?group_by=label.site", "", http.StatusBadRequest)
	d.call("GET", "/v1/devices/h-2/incidents", "", http.StatusNotFound)

	d.token = "admin-secret"
	require.Len(t, d.call("GET", "/v1/devices/h-2/incidents", "", http.StatusOK)["incidents"], 1)
	d.call("DELETE", "/v1/devices/h-2", "", http.StatusNoContent)
	require.Eventually(t, func() bool {
		return len(d.call("GET", "/v1/devices/h-2/incidents", "", http.StatusOK)["incidents"].([]any)) == 0
	}, 10*time.Second, 20*time.Millisecond)
	d.call("GET", "/v1/devices/h-1/incidents?limit=0", "", http.StatusBadRequest)
	d.call("GET", "/v1/availability?window=yesterday", "", http.StatusBadRequest)
}

// With metrics.group_label, /metrics counts the devices with an open incident per site, and
// /v1/availability groups by the kept label.
func TestIncidentsBySiteInMetricsAndAvailability(t *testing.T) {
	d := startActsDaemonSections(t, "", "", "history: {group_labels: [site]}\nmetrics: {group_label: site, max_groups: 1}")
	for dev, site := range map[string]string{"n-1": "north", "n-2": "north", "s-1": "south"} {
		d.call("PUT", "/v1/devices/"+dev, fmt.Sprintf(`{"labels":{"site":%q}}`, site), http.StatusOK)
	}
	d.await("the registered devices never signal", is(event.Interrupted, "n-1"), is(event.Interrupted, "n-2"), is(event.Interrupted, "s-1"))
	require.Eventually(t, func() bool {
		_, body := request(t, d.base, "GET", "/metrics", "", "")
		return strings.Contains(string(body), `heartbeatd_devices_by_group{group="north",state="interrupted"} 2`) &&
			strings.Contains(string(body), `heartbeatd_devices_by_group{group="other",state="interrupted"} 1`)
	}, 10*time.Second, 20*time.Millisecond, "max_groups 1: north, and south under other")
	bySite := d.call("GET", "/v1/availability?window=24h&group_by=label.site", "", http.StatusOK)
	require.Len(t, bySite["groups"], 2)
	assert.Equal(t, "north", bySite["groups"].([]any)[0].(map[string]any)["value"])
}
