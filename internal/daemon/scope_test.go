package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/correlate"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// Every route of the table, called by scoped tokens of each role a scoped token may have: below the
// route's role 403 naming it; a route about one device answers for a device in scope and 404 for one
// outside; a filtered route answers; a fleet-wide one refuses with 403, and only admin routes (which no
// scoped token reaches) are fleet-wide, so a new read or operate route must decide how it treats a scope.
func TestEveryRouteEveryScope(t *testing.T) {
	f := newAPIFixture(t, "admin-secret",
		accessToken("berlin-read", config.RoleRead, "labels.site=berlin"),
		accessToken("berlin-operate", config.RoleOperate, "labels.site=berlin"),
		accessToken("gateways-signal", config.RoleSignal, "device_type=gateway"),
		accessToken("gateways-operate", config.RoleOperate, "device_type=gateway"))
	interrupted := func() { // ber-1, par-1 and gw-1, so each can be acked
		registerSites(t, f)
		f.signal(t, "gw-1", "gateway", f.now)
		f.now = f.now.Add(2 * time.Minute)
		f.interrupt(t)
	}
	interrupted()
	scoped := []struct {
		token   string
		role    config.Role
		in, out string
	}{
		{"berlin-read", config.RoleRead, "ber-1", "par-1"}, {"berlin-operate", config.RoleOperate, "ber-1", "par-1"},
		{"gateways-signal", config.RoleSignal, "gw-1", "ber-1"}, {"gateways-operate", config.RoleOperate, "gw-1", "ber-1"},
	}
	scopeRefusals := 0
	for _, rt := range f.handler.(*api).routes() {
		if openRoutes[rt.pattern] {
			continue
		}
		require.Contains(t, []scopeRule{fleetWide, pathDevice, filtered}, rt.scope, rt.pattern)
		if rt.scope == fleetWide {
			require.Equal(t, config.RoleAdmin, rt.role, "%s: a read, signal or operate route names how a scoped token uses it", rt.pattern)
		}
		method, pattern, _ := strings.Cut(rt.pattern, " ")
		for _, c := range scoped {
			path := func(dev string) string {
				return strings.NewReplacer("{id}", dev, "{id...}", "o-1", "{$}", "").Replace(pattern)
			}
			code, out := admission(t, f.srv.URL, method, path(c.in), c.token+"-secret")
			switch {
			case c.role < rt.role:
				require.Equal(t, http.StatusForbidden, code, "%s as %s: %v", rt.pattern, c.token, out)
				assert.Contains(t, out["error"], "needs the "+rt.role.String()+" role")
				continue
			case rt.scope == fleetWide:
				require.Equal(t, http.StatusForbidden, code, "%s as %s: %v", rt.pattern, c.token, out)
				assert.Contains(t, out["error"], "covers the whole fleet")
				scopeRefusals++
				continue
			}
			assert.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, code, "%s as %s: %v", rt.pattern, c.token, out)
			if rt.scope == pathDevice {
				if method != http.MethodDelete { // the device in scope is still there for the next route
					assert.NotEqual(t, http.StatusNotFound, code, "%s of %s as %s", rt.pattern, c.in, c.token)
				}
				code, _ = admission(t, f.srv.URL, method, path(c.out), c.token+"-secret")
				assert.Equal(t, http.StatusNotFound, code, "%s of %s as %s", rt.pattern, c.out, c.token)
				scopeRefusals++
			}
		}
		if rt.scope == pathDevice && method == http.MethodDelete { // put back what the operate tokens deleted
			interrupted()
		}
	}
	_, metrics := request(t, f.srv.URL, "GET", "/metrics", "", "")
	assert.Contains(t, string(metrics), fmt.Sprintf(`heartbeatd_api_refused_total{reason="scope"} %d`, scopeRefusals))
}

// A scoped token's fleet views: stats without the fleet's counts (a device_type scope gets its type's on
// request), the outages whose group is its scope, and a live stream of its devices' events and its
// outages' only.
func TestScopedFleetViews(t *testing.T) {
	f := newScopedFixture(t)
	code, out := f.call(t, "GET", "/v1/stats?by_type=true&advice=true", "berlin-secret", "")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "labels.site=berlin", out["scope"])
	assert.NotContains(t, out, "by_type", "a label's counts would need a walk over the fleet")
	assert.Contains(t, out, "hold_back")
	code, out = f.call(t, "GET", "/v1/stats?by_type=true", "gateways-secret", "")
	require.Equal(t, http.StatusOK, code)
	byType := out["by_type"].(map[string]any)
	assert.Equal(t, map[string]any{"gateway": float64(1)}, byType["interrupted"], "its own type only")
	assert.Equal(t, map[string]any{"gateway": float64(0)}, byType["online"])

	outages := []correlate.Outage{
		{ID: "outage:labels.site:berlin/1", Group: event.Group{By: "labels.site", Value: "berlin"}},
		{ID: "outage:labels.site:paris/1", Group: event.Group{By: "labels.site", Value: "paris"}},
		{ID: "outage:device_type:gateway/1", Group: event.Group{By: "device_type", Value: "gateway"}},
		{ID: "outage:parent:gw-1/1", Group: event.Group{By: "parent", Value: "gw-1"}},
		{ID: "outage:labels.room:berlin/1", Group: event.Group{By: "labels.room", Value: "berlin"}},
	}
	ids := func(scope string) (out []string) {
		sc, err := config.ParseScope(scope)
		require.NoError(t, err)
		for _, o := range outagesInScope(outages, sc) {
			out = append(out, o.ID)
		}
		return out
	}
	assert.Equal(t, []string{"outage:labels.site:berlin/1"}, ids("labels.site=berlin"))
	assert.Equal(t, []string{"outage:device_type:gateway/1"}, ids("device_type=gateway"))
	assert.Len(t, ids(""), len(outages))

	berlin, gateways, admin := openStreamAs(t, f, "berlin-secret"), openStreamAs(t, f, "gateways-secret"), openStreamAs(t, f, "admin-secret")
	at := f.now
	device := func(kind event.Kind, id, typ string) event.Event {
		return event.New(kind, id, typ, at.Add(-time.Minute), at.Add(-2*time.Minute), at, 0)
	}
	outage := func(by, value string) event.Event {
		e := event.New(event.OutageStarted, "outage:"+by+":"+value, "", at, time.Time{}, at, 0)
		e.OutageID, e.Group, e.Count, e.Sample = "outage:"+by+":"+value+"/1", &event.Group{By: by, Value: value}, 60, []string{"x"}
		return e
	}
	stream := f.handler.(*api).Stream
	stream.Observe([]event.Event{device(event.Interrupted, "par-1", "default"), device(event.Interrupted, "ber-1", "default"),
		device(event.Interrupted, "gw-1", "gateway"), outage("parent", "gw-1"), outage("labels.site", "berlin"),
		event.New(event.Watchdog, "replica-1", "", time.Time{}, time.Time{}, at, 0), outage("device_type", "gateway"),
		device(event.Interrupted, "unknown-1", "default")})
	stream.Observe([]event.Event{device(event.Recovered, "ber-1", "default"), device(event.Recovered, "gw-1", "gateway")})

	// Each stream gets its events in order; one it should not get would come before the next expected.
	for _, want := range []string{"interrupted ber-1", "outage_started outage:labels.site:berlin", "recovered ber-1"} {
		assert.Equal(t, want, berlin.next(t), "berlin's stream")
	}
	for _, want := range []string{"interrupted gw-1", "outage_started outage:device_type:gateway", "recovered gw-1"} {
		assert.Equal(t, want, gateways.next(t), "the gateways' stream")
	}
	for range 8 {
		admin.next(t)
	}
	assert.Equal(t, "recovered ber-1", admin.next(t), "the admin's stream has every event")
}

// scopedStream reads the events of one live stream as "kind device".
type scopedStream struct{ sc *bufio.Scanner }

func openStreamAs(t *testing.T, f *apiFixture, token string) *scopedStream {
	t.Helper()
	req, err := newRequest(http.MethodGet, f.srv.URL+"/v1/events/stream", token, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req.WithContext(t.Context()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	s := &scopedStream{sc: bufio.NewScanner(resp.Body)}
	require.True(t, s.sc.Scan())
	require.Equal(t, ": connected", s.sc.Text(), "subscribed: it sees every event observed from here on")
	return s
}

func (s *scopedStream) next(t *testing.T) string {
	t.Helper()
	for s.sc.Scan() {
		data, ok := strings.CutPrefix(s.sc.Text(), "data: ")
		if !ok {
			continue
		}
		e, err := event.Decode([]byte(data))
		require.NoError(t, err)
		return string(e.Kind) + " " + e.DeviceID
	}
	t.Fatal("the stream ended")
	return ""
}

// A scoped token sees /readyz as an anonymous probe does: which checks fail, not why. The reasons
// (addresses, broker errors) describe the installation, which is the operator's, not a tenant's.
func TestReadyzReasonsOnlyForUnscopedTokens(t *testing.T) {
	f := newScopedFixture(t)
	h := newHealth(func(context.Context) map[string]error {
		return map[string]error{"redis": errors.New("dial tcp 10.0.0.7:6379: connection refused")}
	}, HealthOptions{Interval: time.Hour})
	t.Cleanup(h.Start(context.Background()))
	f.handler.(*api).Health = h

	code, out := f.call(t, "GET", "/readyz", "berlin-secret", "")
	require.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "not ready", out["redis"], "a scoped token")
	code, out = f.call(t, "GET", "/readyz", "admin-secret", "")
	require.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, out["redis"], "10.0.0.7", "the operator's token")
}
