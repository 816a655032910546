package daemon

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// Act events name the token that acted as token, always, and as by too when the request names no one.
// Kafka's events are the audit trail.
func TestActEventsNameTheToken(t *testing.T) {
	dir := t.TempDir()
	opsFile := filepath.Join(dir, "ops-token")
	require.NoError(t, os.WriteFile(opsFile, []byte("ops-secret\n"), 0o600))
	d := startActsDaemonWith(t, fmt.Sprintf(", token: admin-secret, tokens: [{name: ops, role: operate, token_file: %s}]", opsFile), "ops-secret")
	for _, dev := range []string{"a-1", "a-2", "del-1", "sil-1"} {
		d.signal(dev, "")
	}
	d.await("the devices interrupt", is(event.Interrupted, "a-1"), is(event.Interrupted, "a-2"),
		is(event.Interrupted, "del-1"), is(event.Interrupted, "sil-1"))

	d.call("POST", "/v1/devices/a-1/ack", "", http.StatusOK)
	d.call("POST", "/v1/devices/a-2/ack", `{"by":"alice","note":"on site"}`, http.StatusOK)
	d.call("DELETE", "/v1/devices/del-1?by=bob", "", http.StatusNoContent)
	sil := d.call("POST", "/v1/silences", `{"device_id":"sil-1","for":"1h"}`, http.StatusCreated)
	require.Equal(t, "ops", sil["by"], "the silence records its token")
	d.call("DELETE", "/v1/silences/"+sil["id"].(string)+"?by=carol", "", http.StatusNoContent)
	// The admin token acts under its own name.
	d.token = "admin-secret"
	d.signal("adm-1", "")
	d.await("adm-1 interrupts", is(event.Interrupted, "adm-1"))
	d.call("POST", "/v1/devices/adm-1/ack", "", http.StatusOK)

	all := d.await("every act", is(event.Acked, "a-1"), is(event.Acked, "a-2"), is(event.Deleted, "del-1"),
		is(event.Silenced, "sil-1"), is(event.Unsilenced, "sil-1"), is(event.Acked, "adm-1"))
	require.Equal(t, event.Detail{By: "ops", Token: "ops"}, only(t, all, event.Acked, "a-1").Detail)
	require.Equal(t, event.Detail{By: "alice", Note: "on site", Token: "ops"}, only(t, all, event.Acked, "a-2").Detail)
	require.Equal(t, event.Detail{By: "bob", Token: "ops"}, only(t, all, event.Deleted, "del-1").Detail)
	on, off := silenceEvents(t, all, sil["id"].(string), "sil-1")
	require.Equal(t, event.Detail{By: "ops", Token: "ops"}, on.Detail)
	require.Equal(t, event.Detail{By: "carol", Token: "ops"}, off.Detail)
	require.Equal(t, event.Detail{By: "http.token", Token: "http.token"}, only(t, all, event.Acked, "adm-1").Detail)

	// Without a token the API answers 401; a wrong role 403 naming the one needed.
	d.token = ""
	d.call("POST", "/v1/devices/adm-1/ack", "", http.StatusUnauthorized)
	d.token = "ops-secret"
	out := d.call("POST", "/-/reload", "", http.StatusForbidden)
	require.Equal(t, `POST /-/reload needs the admin role; token "ops" has operate`, out["error"])
}
