package daemon

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// badInputCount is heartbeatd_api_bad_input_total{reason} as /metrics shows it (-1: not shown).
func badInputCount(t *testing.T, f *apiFixture, reason string) int {
	t.Helper()
	_, metrics := request(t, f.srv.URL, "GET", "/metrics", "", "")
	prefix := fmt.Sprintf(`heartbeatd_api_bad_input_total{reason=%q} `, reason)
	for _, line := range strings.Split(string(metrics), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			var n int
			_, err := fmt.Sscan(v, &n)
			require.NoError(t, err, line)
			return n
		}
	}
	return -1
}

// actEvents are the published events of kind for device.
func actEvents(f *apiFixture, kind event.Kind, device string) []event.Event {
	var out []event.Event
	for _, e := range f.events.All() {
		if e.Kind == kind && e.DeviceID == device {
			out = append(out, e)
		}
	}
	return out
}

// The audit trail names the token that acted, whatever the request says (issue 58, 1): a request may name
// who acts (by), never which token did (token). A request naming one is refused, on every act, and
// counted; the events of the others carry the acting token's name as token.
func TestActTokenIsTheActingTokens(t *testing.T) {
	f := newAPIFixture(t, "", accessToken("ops", config.RoleOperate, ""), accessToken(config.AdminTokenName, config.RoleAdmin, ""))
	const ops = "ops-secret"
	for _, d := range []string{"forged", "named", "plain", "del-1"} {
		f.signal(t, d, "", f.now.Add(-2*time.Minute))
	}
	f.interrupt(t)

	// The forgery of the issue: an operate token passing the admin token's name off as the actor.
	code, out := f.call(t, "POST", "/v1/devices/forged/ack", ops, `{"token": "http.token"}`)
	require.Equal(t, http.StatusBadRequest, code, "%v", out)
	assert.Contains(t, out["error"], "token")
	assert.Contains(t, out["error"], "bearer token")
	assert.Empty(t, actEvents(f, event.Acked, "forged"), "a refused act publishes nothing")
	_, dev := f.call(t, "GET", "/v1/devices/forged", ops, "")
	assert.Equal(t, false, dev["acked"], "a refused act changes nothing")
	for _, body := range []string{`{"by": "alice", "token": ""}`, `{"token": null}`} {
		code, out = f.call(t, "POST", "/v1/devices/forged/ack", ops, body)
		require.Equal(t, http.StatusBadRequest, code, "%s: %v", body, out)
	}
	code, out = f.call(t, "DELETE", "/v1/devices/del-1?by=bob&token=http.token", ops, "")
	require.Equal(t, http.StatusBadRequest, code, "%v", out)
	assert.Contains(t, out["error"], "token")
	code, out = f.call(t, "POST", "/v1/silences", ops, `{"device_id": "plain", "for": "1h", "token": "http.token"}`)
	require.Equal(t, http.StatusBadRequest, code, "%v", out)
	assert.Contains(t, out["error"], "token")

	// The acts themselves: token is always the acting token's name.
	code, _ = f.call(t, "POST", "/v1/devices/named/ack", ops, `{"by": "alice", "note": "on site"}`)
	require.Equal(t, http.StatusOK, code)
	code, _ = f.call(t, "POST", "/v1/devices/plain/ack", ops, "")
	require.Equal(t, http.StatusOK, code)
	code, _ = f.call(t, "DELETE", "/v1/devices/del-1?by=bob", ops, "")
	require.Equal(t, http.StatusNoContent, code)
	code, sil := f.call(t, "POST", "/v1/silences", ops, `{"device_id": "plain", "for": "1h"}`)
	require.Equal(t, http.StatusCreated, code, "%v", sil)
	assert.Equal(t, "ops", sil["by"])
	assert.Equal(t, "ops", sil["token"])
	id := sil["id"].(string)
	code, out = f.call(t, "DELETE", "/v1/silences/"+id+"?token=http.token", ops, "")
	require.Equal(t, http.StatusBadRequest, code, "%v", out)
	code, _ = f.call(t, "DELETE", "/v1/silences/"+id+"?by=carol", ops, "")
	require.Equal(t, http.StatusNoContent, code)

	only := func(kind event.Kind, device string) event.Detail {
		t.Helper()
		es := actEvents(f, kind, device)
		require.Len(t, es, 1, "%s %s", kind, device)
		return es[0].Detail
	}
	assert.Equal(t, event.Detail{By: "alice", Note: "on site", Token: "ops"}, only(event.Acked, "named"))
	assert.Equal(t, event.Detail{By: "ops", Token: "ops"}, only(event.Acked, "plain"))
	assert.Equal(t, event.Detail{By: "bob", Token: "ops"}, only(event.Deleted, "del-1"))
	assert.Equal(t, event.Detail{By: "ops", Token: "ops"}, only(event.Silenced, "plain"))
	assert.Equal(t, event.Detail{By: "carol", Token: "ops"}, only(event.Unsilenced, "plain"))
	assert.Equal(t, 6, badInputCount(t, f, "act"), "each refusal is counted")
}

// An act's by and note are bounded, so an act cannot grow the event every replica keeps in its ring and
// stream queues, or past what Kafka takes (issue 58, 1): a longer one, or a by with invisible characters,
// is refused with a 400 that says why, on every act, and counted. The bounds themselves are accepted.
func TestActBounds(t *testing.T) {
	// The daemon's own body limit (1 MiB), so a 900 KB note reaches the act's check.
	f := newAPIFixtureWith(t, func(o *APIOptions) { o.MaxBodySize = config.DefaultMaxBodyBytes }, "", accessToken("ops", config.RoleOperate, ""))
	const ops = "ops-secret"
	for _, d := range []string{"d-1", "d-2"} {
		f.signal(t, d, "", f.now.Add(-2*time.Minute))
	}
	f.interrupt(t)
	longBy, longNote, hugeNote := strings.Repeat("b", event.MaxActBy+1), strings.Repeat("n", event.MaxActNote+1), strings.Repeat("n", 900<<10)
	q := func(k, v string) string { return "?" + k + "=" + url.QueryEscape(v) }
	code, sil := f.call(t, "POST", "/v1/silences", ops, `{"device_id": "d-2", "for": "1h"}`)
	require.Equal(t, http.StatusCreated, code, "%v", sil)
	silence := "/v1/silences/" + sil["id"].(string)

	refused := []struct{ method, path, body, says string }{
		{"POST", "/v1/devices/d-1/ack", fmt.Sprintf(`{"by": %q}`, longBy), "by is 129 bytes, at most 128"},
		{"POST", "/v1/devices/d-1/ack", fmt.Sprintf(`{"note": %q}`, longNote), "note is 1025 bytes, at most 1024"},
		{"POST", "/v1/devices/d-1/ack", fmt.Sprintf(`{"note": %q}`, hugeNote), "note is 921600 bytes, at most 1024"},
		{"POST", "/v1/devices/d-1/ack", `{"by": "alice\u202e"}`, "by must not contain"},
		{"DELETE", "/v1/devices/d-1" + q("by", longBy), "", "by is 129 bytes"},
		{"DELETE", "/v1/devices/d-1" + q("note", hugeNote[:8000]), "", "note is 8000 bytes"},
		{"POST", "/v1/silences", fmt.Sprintf(`{"device_id": "d-1", "for": "1h", "by": %q}`, longBy), "by is 129 bytes"},
		{"POST", "/v1/silences", fmt.Sprintf(`{"device_id": "d-1", "for": "1h", "comment": %q}`, longNote), "note is 1025 bytes"},
		{"POST", "/v1/silences", fmt.Sprintf(`{"device_id": "d-1", "for": "1h", "note": %q}`, hugeNote), "note is 921600 bytes"},
		{"DELETE", silence + q("note", longNote), "", "note is 1025 bytes"},
		{"DELETE", silence + q("by", "a\u200bb"), "", "by must not contain"},
	}
	for _, c := range refused {
		code, out := f.call(t, c.method, c.path, ops, c.body)
		require.Equal(t, http.StatusBadRequest, code, "%s %.80s: %v", c.method, c.path, out)
		assert.Contains(t, out["error"], c.says, "%s %.80s", c.method, c.path)
	}
	assert.Empty(t, f.events.All()[1:], "no refused act published an event (the first is the silence's)")
	assert.Equal(t, len(refused), badInputCount(t, f, "act"))

	// At the bounds, every act is taken.
	atBy, atNote := strings.Repeat("b", event.MaxActBy), strings.Repeat("n", event.MaxActNote)
	code, out := f.call(t, "POST", "/v1/devices/d-1/ack", ops, fmt.Sprintf(`{"by": %q, "note": %q}`, atBy, atNote))
	require.Equal(t, http.StatusOK, code, "%v", out)
	code, out = f.call(t, "DELETE", silence+q("by", atBy)+"&note="+atNote, ops, "")
	require.Equal(t, http.StatusNoContent, code, "%v", out)
	code, out = f.call(t, "POST", "/v1/silences", ops, fmt.Sprintf(`{"device_id": "d-1", "for": "1h", "by": %q, "comment": %q}`, atBy, atNote))
	require.Equal(t, http.StatusCreated, code, "%v", out)
	assert.Equal(t, len(refused), badInputCount(t, f, "act"))
}
