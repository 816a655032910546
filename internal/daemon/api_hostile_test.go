package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heartbeatd/heartbeatd/internal/eventkafka"
	"github.com/heartbeatd/heartbeatd/internal/holdback"
	"github.com/heartbeatd/heartbeatd/internal/silence"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// commandCalls is how often Redis ran cmd (INFO commandstats), e.g. "ping", "zscan".
func commandCalls(t *testing.T, rdb *redis.Client, cmd string) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls=")
		if ok {
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			require.NoError(t, err)
			return n
		}
	}
	return 0
}

// storm sends n requests from 16 clients at once and returns every answer's status and body.
func storm(t *testing.T, f *apiFixture, n int, path, token string) (codes map[int]int, bodies []string) {
	t.Helper()
	var mu sync.Mutex
	codes = map[int]int{}
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range 16 {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				req, err := newRequest(http.MethodGet, f.srv.URL+path, token, nil)
				if err != nil {
					t.Error(err)
					return
				}
				resp, err := f.srv.Client().Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				bodies = append(bodies, string(b))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return codes, bodies
}

// TestReadyzStormCostsDependenciesNothing: /readyz is unauthenticated, so it answers from the background
// checks. Its checks here are the daemon's real ones (a Redis PING, a Kafka dial and metadata request);
// 1000 probes add no PING and no Kafka request, and the unauthenticated answer names what is down but
// neither its address nor its error.
func TestReadyzStormCostsDependenciesNothing(t *testing.T) {
	f := newAPIFixture(t, "s3cret")
	kafka := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{"heartbeat.events", "heartbeat.deadletter"}})
	var kafkaRequests atomic.Int64
	kafka.Cluster().Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		kafkaRequests.Add(1)
		return nil, nil, false // only counted: the cluster answers as usual
	})
	pub, err := eventkafka.NewPublisher(eventkafka.PublisherOptions{Brokers: kafka.Addrs, Topic: "heartbeat.events",
		DeadLetterTopic: "heartbeat.deadletter"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	f.check = func(ctx context.Context) map[string]error {
		return map[string]error{"redis": f.store.Ping(ctx), "events": pub.Ready(ctx)}
	}

	// One round at start, then none for an hour: whatever the storm costs shows in the counters.
	pings, kreqs := commandCalls(t, f.rdb, "ping"), kafkaRequests.Load()
	stop := f.health.Start(context.Background())
	defer stop()
	rd, _ := f.health.current()
	require.True(t, rd.ready(), "%v", rd.Checks)
	require.Equal(t, pings+1, commandCalls(t, f.rdb, "ping"), "a round pings Redis once")
	require.Greater(t, kafkaRequests.Load(), kreqs, "a round talks to Kafka")
	pings, kreqs = commandCalls(t, f.rdb, "ping"), kafkaRequests.Load()

	codes, _ := storm(t, f, 1000, "/readyz", "")
	require.Equal(t, map[int]int{http.StatusOK: 1000}, codes)
	require.Equal(t, pings, commandCalls(t, f.rdb, "ping"), "no PING for a probe")
	require.Equal(t, kreqs, kafkaRequests.Load(), "no Kafka request for a probe")

	kafka.Stop()
	f.health.refresh(context.Background())
	rd, _ = f.health.current()
	require.Error(t, rd.Checks["events"])
	kafkaAddr := kafka.Addrs[0]
	require.Contains(t, rd.Checks["events"].Error(), strings.Split(kafkaAddr, ":")[1], "the reason names the broker")

	codes, bodies := storm(t, f, 100, "/readyz", "")
	require.Equal(t, map[int]int{http.StatusServiceUnavailable: 100}, codes)
	for _, b := range bodies {
		var body map[string]any
		require.NoError(t, json.Unmarshal([]byte(b), &body))
		require.Equal(t, "not ready", body["events"])
		require.Equal(t, "ok", body["redis"])
		require.NotContains(t, b, strings.Split(kafkaAddr, ":")[1], "no address without the token")
		require.NotContains(t, b, "127.0.0.1")
	}
	code, body := f.call(t, "GET", "/readyz", "s3cret", "")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, rd.Checks["events"].Error(), body["events"], "the token shows the reason")
}

// TestReadyzBeforeTheFirstCheck: until the first round ends, /readyz is 503 without running one.
func TestReadyzBeforeTheFirstCheck(t *testing.T) {
	h := newHealth(func(context.Context) map[string]error { panic("a probe must not run a check") }, HealthOptions{})
	srv := NewAPI(APIOptions{Health: h, HoldBack: func() holdback.Status { return holdback.Status{} }})
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.JSONEq(t, `{"status":"starting"}`, rec.Body.String())
}

// TestStatsByTypeIsSharedAndCached: per-type counts scan every device; a crowd asking at once costs one
// scan, and they are served from memory until TypeCountsTTL has passed.
func TestStatsByTypeIsSharedAndCached(t *testing.T) {
	f := newAPIFixture(t, "")
	f.online(t, 40, 4)
	scansBefore := commandCalls(t, f.rdb, "zscan") + commandCalls(t, f.rdb, "hscan")
	_, _, err := f.store.CountByType(context.Background())
	require.NoError(t, err)
	perCount := commandCalls(t, f.rdb, "zscan") + commandCalls(t, f.rdb, "hscan") - scansBefore
	require.Positive(t, perCount)

	scans := func() int { return commandCalls(t, f.rdb, "zscan") + commandCalls(t, f.rdb, "hscan") }
	before := scans()
	codes, bodies := storm(t, f, 200, "/v1/stats?by_type=true", "")
	require.Equal(t, map[int]int{http.StatusOK: 200}, codes)
	require.Equal(t, before+perCount, scans(), "one scan for the whole crowd")
	var body map[string]any
	require.NoError(t, json.Unmarshal([]byte(bodies[0]), &body))
	byType := body["by_type"].(map[string]any)
	require.Equal(t, 10.0, byType["online"].(map[string]any)["gateway"])
	require.Equal(t, f.now.UTC().Format(time.RFC3339Nano), byType["as_of"])

	f.signal(t, "late-gw", "gateway", f.now)
	_, body = f.call(t, "GET", "/v1/stats?by_type=true", "", "")
	require.Equal(t, 10.0, body["by_type"].(map[string]any)["online"].(map[string]any)["gateway"], "served from memory within the TTL")
	require.Equal(t, before+perCount, scans())

	f.now = f.now.Add(defaultTypeCountsTTL)
	_, body = f.call(t, "GET", "/v1/stats?by_type=true", "", "")
	require.Equal(t, 11.0, body["by_type"].(map[string]any)["online"].(map[string]any)["gateway"], "counted again after the TTL")
	require.Greater(t, scans(), before+perCount)
}

// TestTypeCountsCacheSharesOneRun: callers arriving during a scan wait for it and get its result; one
// whose request ends (even the one that started it) stops waiting without stopping the scan; a failed scan is shared, not kept.
func TestTypeCountsCacheSharesOneRun(t *testing.T) {
	var c typeCountsCache
	now := func() time.Time { return time.Unix(1000, 0) }
	entered, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int64
	count := func(ctx context.Context) (map[string]int64, map[string]int64, error) {
		if runs.Add(1) == 1 {
			close(entered)
			<-release
		}
		return map[string]int64{"gateway": runs.Load()}, map[string]int64{}, ctx.Err()
	}
	leaderCtx, cancelLeader := context.WithCancel(context.Background())
	results := make(chan *typeCounts, 2)
	leaderErr := make(chan error, 1)
	go func() {
		_, err := c.get(leaderCtx, now, time.Minute, count)
		leaderErr <- err
	}()
	<-entered
	cancelLeader() // the scan runs on for those waiting
	require.ErrorIs(t, <-leaderErr, context.Canceled, "the caller that started the scan stops waiting when its request ends")

	gone, cancelGone := context.WithCancel(context.Background())
	cancelGone()
	_, err := c.get(gone, now, time.Minute, count)
	require.ErrorIs(t, err, context.Canceled, "a waiter whose request ended stops waiting")

	for range 2 {
		go func() {
			tc, err := c.get(context.Background(), now, time.Minute, count)
			if err != nil {
				t.Error(err)
			}
			results <- tc
		}()
	}
	close(release)
	for range 2 {
		tc := <-results
		require.NotNil(t, tc)
		require.Equal(t, int64(1), tc.online["gateway"])
	}
	require.Equal(t, int64(1), runs.Load())

	var failing typeCountsCache
	boom := fmt.Errorf("redis down")
	_, err = failing.get(context.Background(), now, time.Minute, func(context.Context) (map[string]int64, map[string]int64, error) {
		return nil, nil, boom
	})
	require.ErrorIs(t, err, boom)
	tc, err := failing.get(context.Background(), now, time.Minute, count)
	require.NoError(t, err, "a failure is not kept")
	require.NotNil(t, tc)
}

// TestSilencesAreBounded: past silence.MaxStored a create is refused with 409 and nothing is stored.
func TestSilencesAreBounded(t *testing.T) {
	const silencesKey = "hb:silences" // internal/silence's hash under the default prefix (docs/concepts.md)
	f := newAPIFixture(t, "")
	fill := make([]any, 0, 2*(silence.MaxStored-1))
	for i := range silence.MaxStored - 1 {
		b, err := json.Marshal(silence.Silence{ID: fmt.Sprintf("fill-%d", i), DeviceID: fmt.Sprintf("d-%d", i),
			Starts: f.now, Ends: f.now.Add(time.Hour)})
		require.NoError(t, err)
		fill = append(fill, fmt.Sprintf("fill-%d", i), b)
	}
	require.NoError(t, f.rdb.HSet(context.Background(), silencesKey, fill...).Err())

	code, body := f.call(t, "POST", "/v1/silences", "", `{"device_type":"gateway","for":"1h"}`)
	require.Equal(t, http.StatusCreated, code, body)
	code, body = f.call(t, "POST", "/v1/silences", "", `{"device_type":"default","for":"1h"}`)
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body["error"], "too many silences")
	require.Contains(t, body["error"], strconv.Itoa(silence.MaxStored))
	n, err := f.rdb.HLen(context.Background(), silencesKey).Result()
	require.NoError(t, err)
	require.Equal(t, int64(silence.MaxStored), n)

	code, _ = f.call(t, "DELETE", "/v1/silences/fill-0", "", "")
	require.Equal(t, http.StatusNoContent, code)
	code, _ = f.call(t, "POST", "/v1/silences", "", `{"device_type":"default","for":"1h"}`)
	require.Equal(t, http.StatusCreated, code, "room again after a delete")
}

// TestAPIHTTPSemantics: wrong method → 405 with Allow, oversize body → 413, the Bearer scheme in any case,
// and every error a JSON {"error"}.
func TestAPIHTTPSemantics(t *testing.T) {
	f := newAPIFixture(t, "s3cret")
	for _, tc := range []struct{ method, path, allow string }{
		{"PUT", "/v1/stats", "GET, HEAD"},
		{"POST", "/healthz", "GET, HEAD"},
		{"DELETE", "/metrics", "GET, HEAD"},
		{"PATCH", "/v1/silences", "GET, HEAD, POST"},
		{"PATCH", "/v1/devices/dev-1", "GET, HEAD, PUT, DELETE"},
		{"GET", "/v1/devices:import", "POST"},
		{"GET", "/v1/devices/dev-1/ack", "POST"},
		{"GET", "/-/reload", "POST"},
	} {
		req, err := http.NewRequest(tc.method, f.srv.URL+tc.path, nil)
		require.NoError(t, err)
		resp, err := f.srv.Client().Do(req)
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "%s %s", tc.method, tc.path)
		require.Equal(t, tc.allow, resp.Header.Get("Allow"), "%s %s", tc.method, tc.path)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		var body map[string]string
		require.NoError(t, json.Unmarshal(raw, &body))
		require.Contains(t, body["error"], tc.method+" is not allowed")
	}
	code, body := f.call(t, "GET", "/v1/nothing", "s3cret", "")
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body["error"], "/v1/nothing")

	code, body = f.call(t, "POST", "/v1/silences", "s3cret", `{"device_id":"`+strings.Repeat("x", 2000)+`","for":"1h"}`)
	require.Equal(t, http.StatusRequestEntityTooLarge, code)
	require.Equal(t, "body: larger than 1024 bytes", body["error"])
	code, body = f.call(t, "POST", "/v1/silences", "s3cret", `{"device_id":"a","for":"1h"} {"device_id":"b","for":"1h"}`)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body["error"], "one JSON object expected")

	withHeader := func(header string) *http.Response {
		req, err := http.NewRequest("GET", f.srv.URL+"/v1/stats", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", header)
		resp, err := f.srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	for _, header := range []string{"Bearer s3cret", "bearer s3cret", "BEARER s3cret", "Bearer   s3cret", " Bearer s3cret "} {
		require.Equal(t, http.StatusOK, withHeader(header).StatusCode, "%q", header)
	}
	for _, header := range []string{"Basic s3cret", "Bearer", "Bearer ", "Bearers3cret", "Bearer s3cret2", "s3cret"} {
		resp := withHeader(header)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%q", header)
		require.Equal(t, `Bearer realm="heartbeatd"`, resp.Header.Get("WWW-Authenticate"))
	}
}
