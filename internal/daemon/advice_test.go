package daemon

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/ingest"
)

// Devices of one type signalling every 200 ms, through MQTT into the running daemon, show up in
// /v1/stats?advice=true as a 200 ms median and a suggested timeout, beside the type's own; the other
// types are listed without samples.
func TestStatsTimeoutAdvice(t *testing.T) {
	d := startActsDaemon(t)
	var meters []string
	for i := 0; len(meters) < 12; i++ {
		if id := fmt.Sprintf("advice-%d", i); ingest.Sampled(id) {
			meters = append(meters, id)
		}
	}
	const rounds, every = 10, 200 * time.Millisecond
	// Each signal carries its time, so every interval is exactly 200 ms however the broker delivers.
	start := time.Now()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := range rounds {
		at := start.Add(time.Duration(i) * every)
		for _, id := range meters {
			tok := d.device.Publish("devices/"+id+"/heartbeat", 1, false, fmt.Sprintf(`{"type":"meter","ts":%d}`, at.UnixMilli()))
			require.True(t, tok.WaitTimeout(10*time.Second))
			require.NoError(t, tok.Error())
		}
		if i < rounds-1 {
			<-tick.C
		}
	}
	want := len(meters) * (rounds - 1)
	var advice struct {
		Replica string                    `json:"replica"`
		Types   map[string]map[string]any `json:"types"`
	}
	require.Eventually(t, func() bool {
		code, body := callJSON(t, d.base, "GET", "/v1/stats?advice=true", "", "")
		require.Equal(t, http.StatusOK, code, "%v", body)
		raw, ok := body["advice"].(map[string]any)
		require.True(t, ok, "no advice in %v", body)
		advice.Replica, _ = raw["replica"].(string)
		advice.Types = map[string]map[string]any{}
		for name, v := range raw["types"].(map[string]any) {
			advice.Types[name] = v.(map[string]any)
		}
		return advice.Types["meter"]["samples"] == float64(want)
	}, 20*time.Second, 20*time.Millisecond, "%d intervals of the meters", want)

	require.NotEmpty(t, advice.Replica)
	require.Equal(t, map[string]any{"timeout": "1s", "devices": float64(len(meters)), "samples": float64(want),
		"p50": "200ms", "p99": "200ms", "suggested_timeout": "1s"}, advice.Types["meter"])
	require.Equal(t, map[string]any{"timeout": "1s", "devices": 0.0, "samples": 0.0}, advice.Types["default"])

	// Without advice=true the stats carry none.
	_, body := callJSON(t, d.base, "GET", "/v1/stats", "", "")
	require.NotContains(t, body, "advice")
}
