package daemon

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

// A parked claim is counted and named in /v1/stats, and POST /v1/dead/requeue (behind the token like
// the rest of /v1) makes it due again.
func TestAPIParkedClaimsShownAndRequeued(t *testing.T) {
	const token = "s3cret"
	f := newAPIFixture(t, token)
	ctx := context.Background()
	f.signal(t, "poison", "gateway", f.now.Add(-time.Minute))
	res, err := f.store.Claim(ctx, []int{0, 1, 2, 3}, deadline.ClaimOptions{Now: f.now, Lease: time.Minute, Batch: 10})
	require.NoError(t, err)
	require.Len(t, res.Claims, 1)
	c := res.Claims[0]
	st := c.State
	st.Failures, st.Reason = 10, "refused: event: publish to heartbeat.events: [10] Message Size Too Large"
	_, err = f.store.Settle(ctx, []deadline.Ack{{Device: c.Device, Slot: c.Slot, Op: deadline.Park, Claimed: st.Deadline, State: st}},
		deadline.RecordsOf(res.Claims))
	require.NoError(t, err)

	code, body := f.call(t, "GET", "/v1/stats", token, "")
	require.Equal(t, http.StatusOK, code)
	require.EqualValues(t, 1, body["dead_claims"])
	require.Equal(t, []any{map[string]any{"device_id": "poison", "reason": st.Reason,
		"parked_at": f.now.UTC().Format(time.RFC3339Nano)}}, body["parked"])

	code, _ = f.call(t, "POST", "/v1/dead/requeue", "", "")
	require.Equal(t, http.StatusUnauthorized, code)
	code, body = f.call(t, "POST", "/v1/dead/requeue", token, "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"requeued": float64(1)}, body)

	code, body = f.call(t, "GET", "/v1/stats", token, "")
	require.Equal(t, http.StatusOK, code)
	require.EqualValues(t, 0, body["dead_claims"])
	require.NotContains(t, body, "parked")
	d, _, err := f.store.Device(ctx, "poison")
	require.NoError(t, err)
	require.False(t, d.Parked)
	require.Equal(t, f.now, d.NextAct, "due now: its slot's owner publishes it again")
}
