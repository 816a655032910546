package daemon

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// runChain runs an ingest chain writing to refresher (dead letters to deadLetters, nil: none) until the
// test ends.
func runChain(t testing.TB, refresher ingest.Refresher, deadLetters event.DeadLetterSink) *ingest.Chain {
	t.Helper()
	chain, err := ingest.NewChain(refresher, deadLetters, ingest.ChainOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- chain.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return chain
}

// signalFixture serves the API over a redis-server it can stop, with an ingest chain it can stop, and
// tokens: "signal-secret" (signal), "meters-secret" (signal, device_type=meter), "berlin-secret"
// (signal, labels.site=berlin).
type signalFixture struct {
	redis     *testenv.Redis
	store     *deadline.Store
	srv       *httptest.Server
	stopChain func()
}

func newSignalFixture(t *testing.T, wait time.Duration) *signalFixture {
	t.Helper()
	f := &signalFixture{redis: testenv.StartRedis(t)}
	rdb := f.redis.Client(t)
	var err error
	f.store, err = deadline.New(rdb, deadline.Options{Slots: 4, Timeout: func(string) time.Duration { return time.Hour }})
	require.NoError(t, err)
	require.NoError(t, f.store.Load(context.Background(), "default", "meter", "gateway"))
	reg := prometheus.NewRegistry()
	chain, err := ingest.NewChain(f.store, nil, ingest.ChainOptions{Registerer: reg})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- chain.Run(ctx) }()
	var once sync.Once
	f.stopChain = func() { once.Do(func() { cancel(); require.NoError(t, <-done) }) }
	t.Cleanup(f.stopChain)
	f.srv = httptest.NewServer(NewAPI(APIOptions{Store: f.store, Timeout: func(string) time.Duration { return time.Hour },
		Gatherer: reg, Signals: chain, SignalWait: wait,
		Tokens: []config.AccessToken{accessToken("signal", config.RoleSignal, ""), accessToken("meters", config.RoleSignal, "device_type=meter"),
			accessToken("berlin", config.RoleSignal, "labels.site=berlin")}}))
	t.Cleanup(f.srv.Close)
	return f
}

// stored reports whether Redis holds a deadline for device.
func (f *signalFixture) stored(t *testing.T, device string) bool {
	t.Helper()
	d, found, err := f.store.Device(context.Background(), device)
	require.NoError(t, err)
	return found && !d.Deadline.IsZero()
}

// While Redis is down a signal request answers 503 after the bounded wait, saying why, instead of
// hanging; its signal is kept and stored once Redis is back. Requests whose clients gave up, and those
// that waited, leave no goroutine behind.
func TestHTTPSignalsDuringRedisOutage(t *testing.T) {
	f := newSignalFixture(t, 300*time.Millisecond)
	resp, raw := request(t, f.srv.URL, "POST", "/v1/devices/before/signal", "signal-secret", "")
	require.Equal(t, http.StatusNoContent, resp.StatusCode, "%s", raw)
	http.DefaultClient.CloseIdleConnections()
	baseline := goleak.IgnoreCurrent()

	f.redis.Stop(t)
	code, out := callJSON(t, f.srv.URL, "POST", "/v1/signals", "signal-secret", `{"device_id":"during"}`)
	require.Equal(t, http.StatusServiceUnavailable, code, "%v", out)
	require.Contains(t, out["error"], "Redis did not store the signals within 300ms")
	resp, raw = request(t, f.srv.URL, "POST", "/v1/devices/during-2/signal", "signal-secret", "")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", raw)
	var clients sync.WaitGroup
	for i := range 20 { // clients that give up before the wait ends
		clients.Add(1)
		go func() {
			defer clients.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, "POST", fmt.Sprintf("%s/v1/devices/gone-%d/signal", f.srv.URL, i), nil)
			assert.NoError(t, err)
			req.Header.Set("Authorization", "Bearer signal-secret")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_ = resp.Body.Close()
				t.Errorf("a request answered %d while Redis was down, before the wait ended", resp.StatusCode)
			}
		}()
	}
	clients.Wait()
	http.DefaultClient.CloseIdleConnections()

	f.redis.Start(t)
	require.Eventually(t, func() bool { return f.stored(t, "during") && f.stored(t, "during-2") && f.stored(t, "gone-19") },
		20*time.Second, 20*time.Millisecond, "the signals answered 503 are stored once Redis is back")
	http.DefaultClient.CloseIdleConnections()
	goleak.VerifyNone(t, baseline, goleak.IgnoreAnyFunction("github.com/heartbeatd/heartbeatd/internal/testenv.startProcess.func1"))
}

// A request waiting for its signals when the chain stops (heartbeatd shutting down) is answered 503 at
// once, not at the end of its wait; later requests too.
func TestHTTPSignalsAtShutdown(t *testing.T) {
	f := newSignalFixture(t, time.Minute)
	f.redis.Stop(t) // the signal waits for its write
	answered := make(chan int, 1)
	go func() {
		code, _ := callJSON(t, f.srv.URL, "POST", "/v1/signals", "signal-secret", `{"device_id":"a"}`)
		answered <- code
	}()
	require.Eventually(t, func() bool {
		_, _, err := f.store.Device(context.Background(), "a")
		return err != nil // Redis refused a read: by now the chain holds the signal (it was submitted first)
	}, 10*time.Second, 10*time.Millisecond)
	f.stopChain()
	select {
	case code := <-answered:
		require.Equal(t, http.StatusServiceUnavailable, code)
	case <-time.After(10 * time.Second):
		t.Fatal("a request waiting for a stopped chain was not answered")
	}
	code, out := callJSON(t, f.srv.URL, "POST", "/v1/devices/b/signal", "signal-secret", "")
	require.Equal(t, http.StatusServiceUnavailable, code, "%v", out)
	require.Contains(t, out["error"], "shutting down")
}

// A scoped signal token signals only known devices in its scope, and never moves one out of a
// device_type scope: in a batch the others are listed as outside_scope and not stored; on the device
// route they answer 404 (unknown or outside, alike) or 403 (a type outside the scope).
func TestHTTPSignalsOfScopedTokens(t *testing.T) {
	f := newSignalFixture(t, 5*time.Second)
	ctx := context.Background()
	require.NoError(t, f.store.Refresh(ctx, []deadline.Signal{{Device: "m-1", Type: "meter", Seen: time.Now()},
		{Device: "g-1", Type: "gateway", Seen: time.Now()}}))
	_, _, err := f.store.Register(ctx, []string{"ber-1", "par-1"},
		[]deadline.Registration{{Labels: map[string]string{"site": "berlin"}}, {Labels: map[string]string{"site": "paris"}}}, []string{"", ""})
	require.NoError(t, err)

	body := `{"device_id":"m-1"}` + "\n" + `{"device_id":"g-1"}` + "\n" + `{"device_id":"new-1","type":"meter"}` + "\n" +
		`{"device_id":"m-1","type":"gateway"}` + "\n" + `{"device_id":` + "\n" + `{"device_id":"m-1","type":"meter"}` + "\n"
	code, out := callJSON(t, f.srv.URL, "POST", "/v1/signals", "meters-secret", body)
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.EqualValues(t, 2, out["accepted"])
	require.Equal(t, []any{
		map[string]any{"index": 1.0, "reason": "outside_scope"}, map[string]any{"index": 2.0, "reason": "outside_scope"},
		map[string]any{"index": 3.0, "reason": "outside_scope"}, map[string]any{"index": 4.0, "reason": ingest.ReasonMalformedJSON},
	}, out["bad"])
	require.False(t, f.stored(t, "new-1"))
	d, _, err := f.store.Device(ctx, "m-1")
	require.NoError(t, err)
	require.Equal(t, "meter", d.Type, "a signal outside the scope did not change the device's type")

	// Registered devices have a deadline already: a signal from 4 s ahead (within max_clock_skew) shows
	// which one was stored.
	ahead := time.Now().Add(4 * time.Second)
	code, out = callJSON(t, f.srv.URL, "POST", "/v1/signals", "berlin-secret",
		fmt.Sprintf(`[{"device_id":"ber-1","ts":%d},{"device_id":"par-1","ts":%[1]d}]`, ahead.UnixMilli()))
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.EqualValues(t, 1, out["accepted"])
	require.Equal(t, []any{map[string]any{"index": 1.0, "reason": "outside_scope"}}, out["bad"])
	for dev, moved := range map[string]bool{"ber-1": true, "par-1": false} {
		d, _, err := f.store.Device(ctx, dev)
		require.NoError(t, err)
		require.Equal(t, moved, !d.Deadline.Before(ahead.Add(time.Hour).Truncate(time.Millisecond)), "%s: deadline %v", dev, d.Deadline)
	}

	for _, tc := range []struct {
		token, device, body string
		want                int
	}{
		{"meters-secret", "m-1", "", http.StatusNoContent},
		{"meters-secret", "g-1", "", http.StatusNotFound},
		{"meters-secret", "new-2", "", http.StatusNotFound},
		{"meters-secret", "m-1", `{"type":"gateway"}`, http.StatusForbidden},
		{"berlin-secret", "par-1", "", http.StatusNotFound},
		{"signal-secret", "new-2", `{"type":"meter"}`, http.StatusNoContent},
	} {
		resp, raw := request(t, f.srv.URL, "POST", "/v1/devices/"+tc.device+"/signal", tc.token, tc.body)
		require.Equal(t, tc.want, resp.StatusCode, "%s %s %s: %s", tc.token, tc.device, tc.body, raw)
	}
}

// An HTTP signal follows the late-signal rule of docs/signals.md: one whose deadline had passed when it
// arrived is accepted (valid) but moves nothing, and one from the device's past never moves its
// deadline back.
func TestHTTPSignalsLateAndOld(t *testing.T) {
	f := newSignalFixture(t, 5*time.Second)
	now := time.Now()
	body := fmt.Sprintf(`{"device_id":"d-1","ts":%d}`, now.UnixMilli())
	code, out := callJSON(t, f.srv.URL, "POST", "/v1/signals", "signal-secret", body)
	require.Equal(t, http.StatusOK, code, "%v", out)
	before, _, err := f.store.Device(context.Background(), "d-1")
	require.NoError(t, err)
	for _, ts := range []time.Time{now.Add(-2 * time.Hour), now.Add(-time.Minute)} { // late (timeout 1h), then old
		code, out = callJSON(t, f.srv.URL, "POST", "/v1/signals", "signal-secret", fmt.Sprintf(`[{"device_id":"d-1","ts":%d}]`, ts.UnixMilli()))
		require.Equal(t, http.StatusOK, code, "%v", out)
		require.EqualValues(t, 1, out["accepted"])
		after, _, err := f.store.Device(context.Background(), "d-1")
		require.NoError(t, err)
		require.Equal(t, before.Deadline, after.Deadline, "a signal at %v moved the deadline", ts)
	}
	_, metrics := request(t, f.srv.URL, "GET", "/metrics", "", "")
	require.Contains(t, string(metrics), `heartbeatd_signals_total{result="late",source="http"} 1`)
	require.Contains(t, string(metrics), `heartbeatd_signals_total{result="applied",source="http"} 2`)
}
