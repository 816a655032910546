package daemon

import (
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Slow HTTP signal bodies do not hold the batch slots (issue 58, 6): a slot is taken once a body is
// read, so clients trickling their bodies, as many as there are slots and more, never keep a fast one
// from being stored, where before they held every slot for as long as they trickled and the devices
// that push over HTTP went falsely silent.
func TestSlowSignalBodiesDoNotBlockFastOnes(t *testing.T) {
	f := newAPIFixtureWith(t, func(o *APIOptions) { o.SignalWait = 3 * time.Second }, "")
	for i := range maxBatchesRead + 2 {
		conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		body := fmt.Sprintf(`{"device_id":"slow-%d"}`+"\n", i)
		_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-ndjson\r\nContent-Length: %d\r\n\r\n%s",
			signalsPath, f.srv.Listener.Addr(), 1<<20, body) // the rest of the body never comes
		require.NoError(t, err)
	}
	time.Sleep(200 * time.Millisecond) // every slow request is being read

	start := time.Now()
	code, out := f.call(t, "POST", signalsPath, "", `{"device_id":"fast-1"}`+"\n")
	require.Equal(t, http.StatusOK, code, "%v", out)
	assert.Equal(t, float64(1), out["accepted"])
	assert.Less(t, time.Since(start), 2*time.Second, "the fast batch waited for the slow ones")
	code, _ = f.call(t, "GET", "/v1/devices/fast-1", "", "")
	assert.Equal(t, http.StatusOK, code)
}
