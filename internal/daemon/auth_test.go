package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

// accessToken is a named token for the fixture; its secret is "<name>-secret".
func accessToken(name string, role config.Role, scope string) config.AccessToken {
	sc, err := config.ParseScope(scope)
	if err != nil {
		panic(err)
	}
	return config.AccessToken{Name: name, Role: role, Scope: sc, Digest: sha256.Sum256([]byte(name + "-secret"))}
}

// openRoutes are the only routes served without a token: probes, metrics and the status page (which
// holds no data). Any other route the table leaves at RoleNone fails TestEveryRouteEveryRole.
var openRoutes = map[string]bool{"GET /healthz": true, "GET /readyz": true, "GET /metrics": true, "GET /{$}": true}

// Every route of the table, called with no token, an unknown one and a token of every role: 401 without
// a known token, 403 naming the role needed below it, admitted (neither) from it up.
func TestEveryRouteEveryRole(t *testing.T) {
	roles := []config.Role{config.RoleRead, config.RoleSignal, config.RoleOperate, config.RoleAdmin}
	var tokens []config.AccessToken
	for _, r := range roles {
		tokens = append(tokens, accessToken(r.String(), r, ""))
	}
	f := newAPIFixture(t, "", tokens...)
	f.signal(t, "dev-1", "", f.now)
	unauthorized, forbidden := 0, 0
	for _, rt := range f.handler.(*api).routes() {
		method, pattern, _ := strings.Cut(rt.pattern, " ")
		path := strings.NewReplacer("{id}", "dev-1", "{id...}", "o-1", "{$}", "").Replace(pattern)
		if openRoutes[rt.pattern] {
			require.Equal(t, config.RoleNone, rt.role, "%s is open by design", rt.pattern)
			code, _ := admission(t, f.srv.URL, method, path, "")
			assert.NotEqual(t, http.StatusUnauthorized, code, "%s needs no token", rt.pattern)
			continue
		}
		require.NotEqual(t, config.RoleNone, rt.role, "%s names no role: every route but the probes needs one", rt.pattern)
		for _, tok := range []string{"", "unknown-secret"} {
			code, out := admission(t, f.srv.URL, method, path, tok)
			assert.Equal(t, http.StatusUnauthorized, code, "%s with token %q: %v", rt.pattern, tok, out)
			unauthorized++
		}
		for _, role := range roles {
			code, out := admission(t, f.srv.URL, method, path, role.String()+"-secret")
			if role < rt.role {
				require.Equal(t, http.StatusForbidden, code, "%s as %s: %v", rt.pattern, role, out)
				assert.Contains(t, out["error"], "needs the "+rt.role.String()+" role", rt.pattern)
				forbidden++
				continue
			}
			assert.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, code, "%s as %s: %v", rt.pattern, role, out)
		}
	}
	// Every refusal is counted, by reason.
	_, metrics := request(t, f.srv.URL, "GET", "/metrics", "", "")
	assert.Contains(t, string(metrics), fmt.Sprintf(`heartbeatd_api_refused_total{reason="token"} %d`, unauthorized))
	assert.Contains(t, string(metrics), fmt.Sprintf(`heartbeatd_api_refused_total{reason="role"} %d`, forbidden))
}

// admission calls a route and returns its status, with the JSON error of a refusal; the body of an
// admitted call is not read, since the event stream's never ends.
func admission(t *testing.T, base, method, path, token string) (int, map[string]any) {
	t.Helper()
	req, err := newRequest(method, base+path, token, strings.NewReader(""))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	}
	return resp.StatusCode, out
}

// newScopedFixture serves the API with an admin token and two scoped operate tokens, berlin
// (labels.site=berlin) and gateways (device_type=gateway), over three interrupted devices: ber-1 (site
// berlin), par-1 (site paris) and gw-1 (a gateway).
func newScopedFixture(t *testing.T) *apiFixture {
	t.Helper()
	f := newAPIFixture(t, "admin-secret",
		accessToken("berlin", config.RoleOperate, "labels.site=berlin"),
		accessToken("gateways", config.RoleOperate, "device_type=gateway"))
	registerSites(t, f)
	f.signal(t, "gw-1", "gateway", f.now)
	f.now = f.now.Add(2 * time.Minute) // past every deadline: all three are interrupted
	f.interrupt(t)
	return f
}

// registerSites registers ber-1 (site berlin) and par-1 (site paris).
func registerSites(t *testing.T, f *apiFixture) {
	t.Helper()
	_, _, err := f.store.Register(context.Background(), []string{"ber-1", "par-1"},
		[]deadline.Registration{{Labels: map[string]string{"site": "berlin"}}, {Labels: map[string]string{"site": "paris"}}}, []string{"", ""})
	require.NoError(t, err)
}

// A scoped token sees, acks, silences and deletes only the devices in its scope; a device outside it
// answers as one that does not exist; fleet views answer with the scope's part.
func TestScopedTokens(t *testing.T) {
	f := newScopedFixture(t)

	listed := func(token, query string) []string {
		code, out := f.call(t, "GET", "/v1/devices"+query, token, "")
		require.Equal(t, http.StatusOK, code, "%v", out)
		var ids []string
		for _, d := range out["devices"].([]any) {
			ids = append(ids, d.(map[string]any)["device_id"].(string))
		}
		return ids
	}
	const interrupted = "?state=interrupted"
	assert.ElementsMatch(t, []string{"gw-1", "ber-1", "par-1"}, listed("admin-secret", interrupted))
	assert.Equal(t, []string{"ber-1"}, listed("berlin-secret", interrupted))
	assert.Empty(t, listed("berlin-secret", interrupted+"&label=site=paris"))
	assert.Equal(t, []string{"gw-1"}, listed("gateways-secret", interrupted))
	assert.Empty(t, listed("gateways-secret", interrupted+"&type=default"))

	for _, c := range []struct{ token, in, out string }{{"berlin-secret", "ber-1", "par-1"}, {"gateways-secret", "gw-1", "ber-1"}} {
		for _, op := range []struct{ method, path string }{
			{"GET", "/v1/devices/%s"}, {"GET", "/v1/devices/%s/events"}, {"POST", "/v1/devices/%s/ack"}, {"DELETE", "/v1/devices/%s"},
		} {
			code, out := f.call(t, op.method, strings.Replace(op.path, "%s", c.out, 1), c.token, "")
			require.Equal(t, http.StatusNotFound, code, "%s %s by %s: %v", op.method, c.out, c.token, out)
			assert.Equal(t, `device "`+c.out+`" is not known`, out["error"])
		}
		code, out := f.call(t, "POST", "/v1/silences", c.token, `{"device_id":"`+c.out+`","for":"1h"}`)
		require.Equal(t, http.StatusNotFound, code, "silence %s by %s: %v", c.out, c.token, out)
		code, _ = f.call(t, "GET", "/v1/devices/"+c.in, c.token, "")
		require.Equal(t, http.StatusOK, code)
		code, out = f.call(t, "POST", "/v1/devices/"+c.in+"/ack", c.token, "")
		require.Equal(t, http.StatusOK, code, "ack %s by %s: %v", c.in, c.token, out)
		// Fleet views answer with the scope's part (TestScopedFleetViews): no fleet counts here.
		code, out = f.call(t, "GET", "/v1/stats", c.token, "")
		require.Equal(t, http.StatusOK, code, "%v", out)
		assert.NotContains(t, out, "devices", "the fleet's counts are not the scope's")
		assert.NotContains(t, out, "dead_claims")
	}
	// The other devices were not acked by the refused calls.
	code, out := f.call(t, "GET", "/v1/devices/par-1", "admin-secret", "")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, false, out["acked"], "par-1 was not acked by the berlin token")

	// Deleting: out of scope refused above; in scope it goes.
	code, _ = f.call(t, "DELETE", "/v1/devices/ber-1", "berlin-secret", "")
	require.Equal(t, http.StatusNoContent, code)
}

// A scoped token may silence a device in its scope, or its own type; a type silence beyond a label scope
// is refused; its listing shows, and it may end, only the silences it could have made.
func TestScopedSilences(t *testing.T) {
	f := newScopedFixture(t)
	code, berSilence := f.call(t, "POST", "/v1/silences", "berlin-secret", `{"device_id":"ber-1","for":"1h"}`)
	require.Equal(t, http.StatusCreated, code, "%v", berSilence)
	code, out := f.call(t, "POST", "/v1/silences", "berlin-secret", `{"device_type":"default","for":"1h"}`)
	require.Equal(t, http.StatusForbidden, code, "%v", out)
	code, out = f.call(t, "POST", "/v1/silences", "berlin-secret", `{"matchers":[{"label":"site","op":"=","value":"berlin"}],"for":"1h"}`)
	require.Equal(t, http.StatusForbidden, code, "a matcher may reach beyond the scope: %v", out)
	code, gwSilence := f.call(t, "POST", "/v1/silences", "gateways-secret", `{"device_type":"gateway","for":"1h"}`)
	require.Equal(t, http.StatusCreated, code, "%v", gwSilence)
	code, parSilence := f.call(t, "POST", "/v1/silences", "admin-secret", `{"device_id":"par-1","for":"1h"}`)
	require.Equal(t, http.StatusCreated, code)
	silenceIDs := func(token string) []string {
		code, out := f.call(t, "GET", "/v1/silences", token, "")
		require.Equal(t, http.StatusOK, code)
		var ids []string
		for _, s := range out["silences"].([]any) {
			ids = append(ids, s.(map[string]any)["id"].(string))
		}
		return ids
	}
	assert.Equal(t, []string{berSilence["id"].(string)}, silenceIDs("berlin-secret"))
	assert.Equal(t, []string{gwSilence["id"].(string)}, silenceIDs("gateways-secret"))
	assert.Len(t, silenceIDs("admin-secret"), 3)
	code, _ = f.call(t, "DELETE", "/v1/silences/"+parSilence["id"].(string), "berlin-secret", "")
	require.Equal(t, http.StatusNotFound, code, "the berlin token cannot end the paris silence")
	assert.Len(t, silenceIDs("admin-secret"), 3)
	code, _ = f.call(t, "DELETE", "/v1/silences/"+berSilence["id"].(string), "berlin-secret", "")
	require.Equal(t, http.StatusNoContent, code)
	assert.Empty(t, silenceIDs("berlin-secret"))
}

// whoami tells a token what it is; without any configured token the caller is an anonymous admin.
func TestWhoami(t *testing.T) {
	f := newAPIFixture(t, "admin-secret", accessToken("berlin", config.RoleRead, "labels.site=berlin"))
	code, out := f.call(t, "GET", "/v1/whoami", "berlin-secret", "")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, map[string]any{"name": "berlin", "role": "read", "scope": "labels.site=berlin"}, out)
	_, out = f.call(t, "GET", "/v1/whoami", "admin-secret", "")
	assert.Equal(t, map[string]any{"name": config.AdminTokenName, "role": "admin", "scope": ""}, out)

	open := newAPIFixture(t, "")
	_, out = open.call(t, "GET", "/v1/whoami", "", "")
	assert.Equal(t, map[string]any{"name": "", "role": "admin", "scope": ""}, out)
}
