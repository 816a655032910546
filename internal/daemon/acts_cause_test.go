package daemon

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// An operator act on the incident of a reported failure carries the failure's time as last_seen, as the
// incident's other events and GET /v1/devices/{id} do (docs/signals.md#reported-failures): the device
// spoke then, not one timeout before its moved deadline.
func TestActsOnAReportedFailureKeepItsLastSeen(t *testing.T) {
	d := startActsDaemon(t)
	for _, id := range []string{"rf-ack", "rf-del"} {
		tok := d.device.Publish("devices/"+id+"/heartbeat", 1, false, `{"status":"fail","reason":"pressure sensor stuck"}`)
		require.True(t, tok.WaitTimeout(10*time.Second))
		require.NoError(t, tok.Error())
	}
	all := d.await("both failures", is(event.Interrupted, "rf-ack"), is(event.Interrupted, "rf-del"))

	d.call("POST", "/v1/devices/rf-ack/ack", `{"by":"ana"}`, http.StatusOK)
	d.call("DELETE", "/v1/devices/rf-del?by=ana", "", http.StatusNoContent)
	all = d.await("the acts", is(event.Acked, "rf-ack"), is(event.Deleted, "rf-del"))
	for kind, id := range map[event.Kind]string{event.Acked: "rf-ack", event.Deleted: "rf-del"} {
		failure := only(t, all, event.Interrupted, id)
		require.Equal(t, "reported", failure.Cause)
		act := only(t, all, kind, id)
		require.Equal(t, failure.LastSeen, act.LastSeen, "%s: the failure's time", kind)
		require.Equal(t, act.At.Sub(act.LastSeen).Milliseconds(), act.SilentForMs, "%s", kind)
	}
}
