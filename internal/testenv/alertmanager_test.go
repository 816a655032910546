package testenv_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// Alertmanager takes an alert and serves it back; a pause keeps it, a restart loses it (alerts live in
// its memory only), and the restarted server answers on the same URL.
func TestAlertmanagerKeepsAlertsOverAPauseNotARestart(t *testing.T) {
	am := testenv.StartAlertmanager(t)
	ctx := context.Background()
	alerts := func() []testenv.Alert {
		t.Helper()
		list, err := am.Alerts(ctx)
		require.NoError(t, err)
		return list
	}
	require.Empty(t, alerts())
	ends := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Post(am.URL+"/api/v2/alerts", "application/json",
		strings.NewReader(`[{"labels":{"alertname":"TestAlert","device_id":"d1"},"endsAt":"`+ends+`"}]`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Eventually(t, func() bool { return len(alerts()) == 1 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, "d1", alerts()[0].Labels["device_id"])

	am.Pause(t)
	am.Resume(t)
	require.Len(t, alerts(), 1, "kept over a pause")

	am.Stop(t)
	require.Zero(t, am.PID())
	am.Start(t)
	require.Empty(t, alerts(), "lost with the process")
}
