package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/alarm"
	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/history"
	"github.com/heartbeatd/heartbeatd/internal/holdback"
	"github.com/heartbeatd/heartbeatd/internal/silence"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

type apiFixture struct {
	srv      *httptest.Server
	handler  http.Handler
	rdb      *redis.Client
	store    *deadline.Store
	silences *silence.Silences
	// health runs check, or, when check is nil, reports redisErr for Redis and the rest ready. It does
	// not run by itself: refresh it, or Start it (its interval is an hour: one round, then none).
	health   *Health
	check    func(ctx context.Context) map[string]error
	now      time.Time
	reloads  int
	redisErr error
	holdBack atomic.Pointer[holdback.Status] // what the API's HoldBack hook answers
	events   *testenv.EventLog               // the act events the API and the silences published
	reg      *prometheus.Registry
}

// newAPIFixture serves the API with token (an admin; "" = none) and any further named tokens.
func newAPIFixture(t testing.TB, token string, tokens ...config.AccessToken) *apiFixture {
	t.Helper()
	return newAPIFixtureWith(t, nil, token, tokens...)
}

// newAPIFixtureWith is newAPIFixture with the API's options changed by edit (nil: none) before it is built.
func newAPIFixtureWith(t testing.TB, edit func(*APIOptions), token string, tokens ...config.AccessToken) *apiFixture {
	t.Helper()
	rdb := testenv.StartRedis(t).Client(t)
	f := &apiFixture{rdb: rdb, now: time.Now().Truncate(time.Millisecond), events: &testenv.EventLog{}}
	f.holdBack.Store(&holdback.Status{Active: true, Since: f.now.Add(-time.Minute), Reason: "mqtt: disconnected"})
	timeout := func(typ string) time.Duration {
		if typ == "gateway" {
			return 30 * time.Second
		}
		return time.Minute
	}
	store, err := deadline.New(rdb, deadline.Options{Slots: 4, Now: func() time.Time { return f.now }, Timeout: timeout})
	require.NoError(t, err)
	require.NoError(t, store.Load(context.Background(), "default", "gateway"))
	f.store = store
	hist := history.New(history.Options{Client: rdb, Now: func() time.Time { return f.now }})
	acts := alarm.NewActs(alarm.ActsOptions{Sink: history.Recording(f.events, hist)})
	f.silences = silence.New(rdb, silence.Options{Now: func() time.Time { return f.now }, Events: acts})
	reg := prometheus.NewRegistry()
	f.reg = reg
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "heartbeatd_test_total", Help: "x"}))
	f.health = newHealth(func(ctx context.Context) map[string]error {
		if f.check != nil {
			return f.check(ctx)
		}
		return map[string]error{"redis": f.redisErr, "events": nil}
	}, HealthOptions{Interval: time.Hour})
	f.health.refresh(context.Background())
	opts := APIOptions{
		Store: store, Silences: f.silences,
		HoldBack: func() holdback.Status { return *f.holdBack.Load() },
		Health:   f.health,
		Reload: func() error {
			f.reloads++
			if f.reloads > 1 {
				return errors.New("types.gateway.timeout: must be positive")
			}
			return nil
		},
		OwnedSlots: func() []int { return []int{0, 1, 2, 3} },
		Timeout:    timeout, Token: token, Tokens: tokens, Gatherer: reg, Registerer: reg, MaxBodySize: 1024,
		Now: func() time.Time { return f.now }, Signals: runChain(t, store, nil), Events: acts, History: hist,
	}
	if edit != nil {
		edit(&opts)
	}
	h := NewAPI(opts)
	f.handler = h
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	return f
}

// call makes a request and decodes the JSON answer into a map (nil for an empty body).
func (f *apiFixture) call(t *testing.T, method, path, token, body string) (int, map[string]any) {
	t.Helper()
	return callJSON(t, f.srv.URL, method, path, token, body)
}

// callJSON sends one request to the API at base, with the bearer token when given, and decodes a JSON
// answer (nil for an empty or non-JSON one).
func callJSON(t *testing.T, base, method, path, token, body string) (int, map[string]any) {
	t.Helper()
	resp, raw := request(t, base, method, path, token, body)
	if len(raw) == 0 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return resp.StatusCode, nil
	}
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	return resp.StatusCode, out
}

// request sends one request to the API at base, with the bearer token when given, and returns the answer
// with its body read.
func request(t *testing.T, base, method, path, token, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := newRequest(method, base+path, token, strings.NewReader(body))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, raw
}

// newRequest is a request to url with the bearer token when one is given.
func newRequest(method, url, token string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequest(method, url, body)
	if err == nil && token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req, err
}

func (f *apiFixture) signal(t testing.TB, device, typ string, seen time.Time) {
	t.Helper()
	require.NoError(t, f.store.Refresh(context.Background(), []deadline.Signal{{Device: device, Type: typ, Seen: seen}}))
}

// online signals devices d-00 … d-<n-1> at now: every gatewayEvery-th a gateway, the others untyped.
func (f *apiFixture) online(t testing.TB, n, gatewayEvery int) {
	t.Helper()
	for i := range n {
		typ := ""
		if i%gatewayEvery == 0 {
			typ = "gateway"
		}
		f.signal(t, fmt.Sprintf("d-%02d", i), typ, f.now)
	}
}

// interrupt opens an incident for every device whose deadline passed by now and records the
// interruption as sent, as the alarm loop would.
func (f *apiFixture) interrupt(t testing.TB) {
	t.Helper()
	res, err := f.store.Claim(context.Background(), []int{0, 1, 2, 3}, deadline.ClaimOptions{Now: f.now, Lease: time.Minute, Batch: 100})
	require.NoError(t, err)
	acks := make([]deadline.Ack, 0, len(res.Claims))
	for _, c := range res.Claims {
		st := c.State
		st.Next, st.InterruptedAt = 1, f.now.UnixMilli()
		acks = append(acks, deadline.Ack{Device: c.Device, Slot: c.Slot, Op: deadline.Reschedule, Claimed: st.Deadline, Next: f.now.Add(time.Hour), State: st})
	}
	_, err = f.store.Acknowledge(context.Background(), acks)
	require.NoError(t, err)
}

func TestAPIDeviceStates(t *testing.T) {
	f := newAPIFixture(t, "")
	t0 := f.now
	f.signal(t, "gw-1", "gateway", t0)
	f.signal(t, "dev-1", "", t0.Add(-2*time.Minute)) // deadline passed a minute ago

	code, body := f.call(t, "GET", "/v1/devices/gw-1", "", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "online", body["state"])
	require.Equal(t, "gateway", body["device_type"])
	require.Equal(t, t0.Add(30*time.Second).UTC().Format(time.RFC3339Nano), body["deadline"])
	require.Equal(t, t0.UTC().Format(time.RFC3339Nano), body["last_seen"])
	require.Nil(t, body["interrupted_at"])

	f.interrupt(t)
	code, body = f.call(t, "GET", "/v1/devices/dev-1", "", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "interrupted", body["state"])
	require.Equal(t, t0.UTC().Format(time.RFC3339Nano), body["interrupted_at"])
	require.Equal(t, false, body["acked"])

	code, _ = f.call(t, "POST", "/v1/devices/dev-1/ack", "", "")
	require.Equal(t, http.StatusOK, code)
	_, body = f.call(t, "GET", "/v1/devices/dev-1", "", "")
	require.Equal(t, true, body["acked"])
	code, body = f.call(t, "POST", "/v1/devices/gw-1/ack", "", "")
	require.Equal(t, http.StatusNotFound, code, "an online device has nothing to acknowledge")
	require.Contains(t, body["error"], "gw-1")

	code, body = f.call(t, "GET", "/v1/devices/never-seen", "", "")
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body["error"], "never-seen")

	code, _ = f.call(t, "DELETE", "/v1/devices/dev-1", "", "")
	require.Equal(t, http.StatusNoContent, code)
	code, _ = f.call(t, "GET", "/v1/devices/dev-1", "", "")
	require.Equal(t, http.StatusNotFound, code, "deleted: no longer monitored")
	code, _ = f.call(t, "DELETE", "/v1/devices/dev-1", "", "")
	require.Equal(t, http.StatusNotFound, code)
}

func TestAPIListingPagesThroughEveryDevice(t *testing.T) {
	f := newAPIFixture(t, "")
	f.online(t, 25, 5)
	for i := range 7 {
		f.signal(t, fmt.Sprintf("silent-%d", i), "", f.now.Add(-2*time.Minute))
	}
	f.interrupt(t)

	collect := func(query string) []string {
		var ids []string
		cursor := ""
		for pages := 0; ; pages++ {
			require.Less(t, pages, 50, "paging must end")
			code, body := f.call(t, "GET", "/v1/devices?"+query+"&limit=4&cursor="+cursor, "", "")
			require.Equal(t, http.StatusOK, code, body)
			for _, d := range body["devices"].([]any) {
				ids = append(ids, d.(map[string]any)["device_id"].(string))
			}
			cursor, _ = body["next_cursor"].(string)
			if cursor == "" {
				return ids
			}
		}
	}
	online := collect("state=online")
	require.Len(t, online, 25)
	require.ElementsMatch(t, online, unique(online), "no device twice")
	require.Len(t, collect("state=interrupted"), 7)
	require.Len(t, collect("state=online&type=gateway"), 5)

	for _, bad := range []string{"state=asleep", "limit=0", "limit=x", "cursor=not-a-cursor"} {
		code, body := f.call(t, "GET", "/v1/devices?"+bad, "", "")
		require.Equal(t, http.StatusBadRequest, code, bad)
		require.NotEmpty(t, body["error"], bad)
	}

	code, body := f.call(t, "GET", "/v1/stats", "", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"online": 25.0, "interrupted": 7.0}, body["devices"])
	require.Equal(t, []any{0.0, 1.0, 2.0, 3.0}, body["owned_slots"])
	require.Equal(t, true, body["hold_back"].(map[string]any)["active"])
	_, body = f.call(t, "GET", "/v1/stats?by_type=true", "", "")
	require.Equal(t, 5.0, body["by_type"].(map[string]any)["online"].(map[string]any)["gateway"])
}

func unique(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

func TestAPISilences(t *testing.T) {
	f := newAPIFixture(t, "")
	code, created := f.call(t, "POST", "/v1/silences", "", `{"device_type":"gateway","for":"2h","comment":"firmware rollout"}`)
	require.Equal(t, http.StatusCreated, code, created)
	id := created["id"].(string)
	require.Equal(t, f.now.Add(2*time.Hour).UTC().Format(time.RFC3339Nano), created["ends"])
	until := f.now.Add(time.Hour).UTC().Format(time.RFC3339)
	code, _ = f.call(t, "POST", "/v1/silences", "", `{"device_id":"gw-1","until":"`+until+`"}`)
	require.Equal(t, http.StatusCreated, code)

	f.signal(t, "gw-1", "gateway", f.now)
	_, dev := f.call(t, "GET", "/v1/devices/gw-1", "", "")
	require.Equal(t, f.now.Add(2*time.Hour).UTC().Format(time.RFC3339Nano), dev["silenced_until"], "the later of the two silences")

	_, list := f.call(t, "GET", "/v1/silences", "", "")
	require.Len(t, list["silences"], 2)
	code, _ = f.call(t, "DELETE", "/v1/silences/"+id, "", "")
	require.Equal(t, http.StatusNoContent, code)
	code, _ = f.call(t, "DELETE", "/v1/silences/"+id, "", "")
	require.Equal(t, http.StatusNotFound, code)
	_, list = f.call(t, "GET", "/v1/silences", "", "")
	require.Len(t, list["silences"], 1)

	for _, bad := range []string{
		`{"for":"2h"}`,
		`{"device_id":"a","device_type":"b","for":"2h"}`,
		`{"device_id":"a"}`,
		`{"device_id":"a","for":"soon"}`,
		`{"device_id":"a","until":"2020-01-01T00:00:00Z"}`,
		`{"device_id":"a","for":"1h","colour":"red"}`,
		`not json`,
		`{"device_id":"` + strings.Repeat("x", 2000) + `","for":"1h"}`,
	} {
		code, body := f.call(t, "POST", "/v1/silences", "", bad)
		require.Contains(t, []int{http.StatusBadRequest, http.StatusRequestEntityTooLarge}, code, bad)
		require.NotEmpty(t, body["error"], bad)
	}
}

func TestAPIBearerToken(t *testing.T) {
	f := newAPIFixture(t, "s3cret")
	for _, path := range []string{"/v1/stats", "/v1/devices", "/v1/silences", "/v1/devices/x"} {
		code, body := f.call(t, "GET", path, "", "")
		require.Equal(t, http.StatusUnauthorized, code, path)
		require.Contains(t, body["error"], "token")
		code, _ = f.call(t, "GET", path, "wrong", "")
		require.Equal(t, http.StatusUnauthorized, code, path)
	}
	code, _ := f.call(t, "GET", "/v1/stats", "s3cret", "")
	require.Equal(t, http.StatusOK, code)
	code, _ = f.call(t, "POST", "/-/reload", "", "")
	require.Equal(t, http.StatusUnauthorized, code, "reload changes behaviour: it needs the token too")
	// Probes and metrics stay open for orchestrators and scrapers.
	code, _ = f.call(t, "GET", "/healthz", "", "")
	require.Equal(t, http.StatusOK, code)
	code, _ = f.call(t, "GET", "/readyz", "", "")
	require.Equal(t, http.StatusOK, code)
}

func TestAPIProbesReloadMetricsAndUnknownRoutes(t *testing.T) {
	f := newAPIFixture(t, "")
	code, body := f.call(t, "GET", "/readyz", "", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok", body["redis"])
	require.Equal(t, true, body["hold_back"].(map[string]any)["active"], "a hold-back is shown, but does not make the process unready")
	require.NotContains(t, body, "status")

	// Past max_hold_back: detection runs degraded, and says so without leaving service.
	f.holdBack.Store(&holdback.Status{Degraded: true, Windows: []holdback.Window{{ID: "ingest/mqtt", Replica: "r1",
		Cause: holdback.CauseIngest, Scope: holdback.ScopeAll, From: f.now.Add(-time.Hour), Opened: f.now.Add(-time.Hour), Reason: "mqtt: disconnected"}}})
	code, body = f.call(t, "GET", "/readyz", "", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "degraded", body["status"])
	hb := body["hold_back"].(map[string]any)
	require.Equal(t, true, hb["degraded"])
	require.Equal(t, "ingest", hb["windows"].([]any)[0].(map[string]any)["cause"], "the windows are named")
	f.holdBack.Store(&holdback.Status{})
	code, body = f.call(t, "GET", "/readyz", "", "")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "hold_back")

	f.redisErr = errors.New("dial tcp 127.0.0.1:6379: connection refused")
	code, body = f.call(t, "GET", "/readyz", "", "")
	require.Equal(t, http.StatusOK, code, "answered from the last check, not by checking")
	f.health.refresh(context.Background())
	code, body = f.call(t, "GET", "/readyz", "", "")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body["redis"], "connection refused", "no token configured: every caller gets the reason")
	require.Equal(t, "ok", body["events"])

	code, _ = f.call(t, "POST", "/-/reload", "", "")
	require.Equal(t, http.StatusOK, code)
	code, body = f.call(t, "POST", "/-/reload", "", "")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body["error"], "types.gateway.timeout")

	resp, err := http.Get(f.srv.URL + "/metrics")
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(raw), "heartbeatd_test_total 0")

	code, body = f.call(t, "GET", "/v2/nothing", "", "")
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body["error"], "/v2/nothing")
}
