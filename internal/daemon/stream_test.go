package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	contract "github.com/heartbeatd/heartbeatd/api"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

const streamToken = "s3cret"

// acceptingSink acknowledges every event, as Kafka would.
type acceptingSink struct{}

func (acceptingSink) Publish(_ context.Context, events []event.Event) []error {
	return make([]error, len(events))
}

// streamFixture is the API with an EventStream behind it, and a sink that publishes through it.
type streamFixture struct {
	stream *EventStream
	sink   event.Sink
	srv    *httptest.Server
	at     time.Time
}

func newStreamFixture(t *testing.T, opts StreamOptions) *streamFixture {
	t.Helper()
	f := &streamFixture{stream: newEventStream(opts), at: time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)}
	f.sink = event.Observed(acceptingSink{}, f.stream)
	f.srv = httptest.NewUnstartedServer(NewAPI(APIOptions{Token: streamToken, Gatherer: prometheus.NewRegistry(), Stream: f.stream}))
	// Far shorter than a stream lives: the server's timeouts are for ordinary answers.
	f.srv.Config.ReadTimeout, f.srv.Config.WriteTimeout = 100*time.Millisecond, 100*time.Millisecond
	f.srv.Config.RegisterOnShutdown(f.stream.Close)
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	return f
}

// interrupted is one interrupted event per device, a second apart.
func (f *streamFixture) interrupted(devices ...string) []event.Event {
	events := make([]event.Event, len(devices))
	for i, d := range devices {
		f.at = f.at.Add(time.Second)
		events[i] = event.New(event.Interrupted, d, "gateway", f.at.Add(-time.Second), f.at.Add(-time.Minute), f.at, 0)
	}
	return events
}

// publish sends one interrupted event per device through the observed sink.
func (f *streamFixture) publish(t *testing.T, devices ...string) []event.Event {
	t.Helper()
	events := f.interrupted(devices...)
	for _, err := range f.sink.Publish(context.Background(), events) {
		require.NoError(t, err)
	}
	return events
}

// sseReader reads one live stream frame by frame.
type sseReader struct {
	resp *http.Response
	sc   *bufio.Scanner
}

// openStream connects to the live stream and waits for its first frame (": connected"), after which the
// stream is subscribed and sees every event published.
func (f *streamFixture) openStream(t *testing.T) *sseReader {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, f.srv.URL+"/v1/events/stream", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+streamToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	r := &sseReader{resp: resp, sc: bufio.NewScanner(resp.Body)}
	require.Equal(t, []string{": connected"}, r.frame(t))
	return r
}

// frame reads the lines of the next frame (up to the blank line); nil at the end of the stream.
func (r *sseReader) frame(t *testing.T) []string {
	t.Helper()
	var lines []string
	for r.sc.Scan() {
		if r.sc.Text() == "" {
			return lines
		}
		lines = append(lines, r.sc.Text())
	}
	require.Empty(t, lines, "the stream ended inside a frame")
	return nil
}

// event reads frames until the next data frame, skipping keepalive comments, and decodes its event.
func (r *sseReader) event(t *testing.T) event.Event {
	t.Helper()
	for {
		lines := r.frame(t)
		require.NotNil(t, lines, "the stream ended")
		if len(lines) == 1 && lines[0] == ": keepalive" {
			continue
		}
		require.Len(t, lines, 1, "one data line per event: %q", lines)
		data, ok := strings.CutPrefix(lines[0], "data: ")
		require.True(t, ok, "a data frame: %q", lines[0])
		require.NoError(t, contract.ValidateEventClosed([]byte(data)))
		ev, err := event.Decode([]byte(data))
		require.NoError(t, err)
		return ev
	}
}

// An event Kafka acknowledged reaches every open stream, in order, in its wire form; an event Kafka
// refused does not (it will be published, and streamed, again).
func TestStreamDeliversObservedEvents(t *testing.T) {
	f := newStreamFixture(t, StreamOptions{})
	a, b := f.openStream(t), f.openStream(t)
	want := f.publish(t, "dev-1", "dev-2")
	for _, r := range []*sseReader{a, b} {
		for _, w := range want {
			require.Equal(t, w, r.event(t))
		}
	}

	refusing := event.Observed(refusingSink{refuse: "dev-3"}, f.stream)
	errs := refusing.Publish(context.Background(), []event.Event{
		event.New(event.Interrupted, "dev-3", "", f.at, f.at, f.at, 0), event.New(event.Recovered, "dev-1", "gateway", f.at, f.at, f.at, 0),
	})
	require.Error(t, errs[0])
	require.Equal(t, "dev-1", a.event(t).DeviceID, "the refused event is skipped")
}

type refusingSink struct{ refuse string }

func (s refusingSink) Publish(_ context.Context, events []event.Event) []error {
	errs := make([]error, len(events))
	for i, e := range events {
		if e.DeviceID == s.refuse {
			errs[i] = fmt.Errorf("refused")
		}
	}
	return errs
}

// A stream that falls a whole buffer behind is dropped at once, publishing never waits for it, and the
// streams that keep up go on receiving.
func TestStreamDropsASlowClientWithoutBlocking(t *testing.T) {
	const buffer = 4
	reg := prometheus.NewRegistry()
	f := newStreamFixture(t, StreamOptions{Buffer: buffer, Registerer: reg})
	fast := f.openStream(t)
	slow, err := f.stream.subscribe("") // never read: as a page that stopped reading
	require.NoError(t, err)
	require.Equal(t, 2.0, testenv.MetricValue(t, f.stream.open))

	for round := range 3 {
		devices := make([]string, buffer)
		for i := range devices {
			devices[i] = fmt.Sprintf("dev-%d-%d", round, i)
		}
		events := f.interrupted(devices...)
		published := make(chan struct{})
		go func() {
			defer close(published)
			f.sink.Publish(context.Background(), events)
		}()
		select {
		case <-published:
		case <-time.After(20 * time.Second):
			t.Fatal("publishing blocked on a slow stream")
		}
		for _, d := range devices { // the fast stream keeps up with every round
			require.Equal(t, d, fast.event(t).DeviceID)
		}
	}
	for range buffer {
		<-slow.frames // what was queued before it fell behind
	}
	_, open := <-slow.frames
	require.False(t, open, "the slow stream's queue is closed")
	require.True(t, slow.dropped)
	require.Equal(t, 1.0, testenv.MetricValue(t, f.stream.dropped))
	require.Equal(t, 1.0, testenv.MetricValue(t, f.stream.open))
}

// A dropped stream's client is told why before the stream ends, so the page reloads instead of missing
// events silently.
func TestStreamTellsADroppedClient(t *testing.T) {
	f := newStreamFixture(t, StreamOptions{})
	r := f.openStream(t)
	f.stream.mu.Lock()
	require.Len(t, f.stream.clients, 1)
	for c := range f.stream.clients {
		f.stream.dropLocked(c, true)
	}
	f.stream.mu.Unlock()
	lines := r.frame(t)
	require.Len(t, lines, 2)
	require.Equal(t, "event: dropped", lines[0])
	require.True(t, json.Valid([]byte(strings.TrimPrefix(lines[1], "data: "))), lines[1])
	require.Nil(t, r.frame(t), "the stream ends")
}

// The stream needs the token, is bounded in clients, outlives the server's WriteTimeout with keepalive
// comments, and ends when the server shuts down.
func TestStreamAuthLimitsKeepaliveAndShutdown(t *testing.T) {
	f := newStreamFixture(t, StreamOptions{MaxClients: 1, Keepalive: 20 * time.Millisecond})
	for _, tok := range []string{"", "wrong"} {
		code, body := callJSON(t, f.srv.URL, http.MethodGet, "/v1/events/stream", tok, "")
		require.Equal(t, http.StatusUnauthorized, code, "token %q", tok)
		require.Equal(t, "missing or wrong bearer token", body["error"])
	}

	head, err := http.NewRequest(http.MethodHead, f.srv.URL+"/v1/events/stream", nil)
	require.NoError(t, err)
	head.Header.Set("Authorization", "Bearer "+streamToken)
	resp, err := http.DefaultClient.Do(head)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"), "HEAD answers at once, taking no stream")

	r := f.openStream(t)
	code, body := callJSON(t, f.srv.URL, http.MethodGet, "/v1/events/stream", streamToken, "")
	require.Equal(t, http.StatusServiceUnavailable, code, "beyond MaxClients")
	require.Contains(t, body["error"], "too many live streams")

	// Ten keepalives are 200ms, twice the server's ReadTimeout and WriteTimeout: neither ends a stream.
	for range 10 {
		require.Equal(t, []string{": keepalive"}, r.frame(t))
	}
	want := f.publish(t, "dev-late")
	require.Equal(t, want[0], r.event(t))

	require.NoError(t, f.srv.Config.Shutdown(t.Context()))
	for lines := r.frame(t); lines != nil; lines = r.frame(t) {
		require.Equal(t, []string{": keepalive"}, lines)
	}
	_, err = f.stream.subscribe("")
	require.ErrorIs(t, err, errStreamClosed)
}

// GET /v1/devices/{id}/events answers the device's kept events, newest first, each id once, at most
// DeviceEventsShown, from a ring that forgets the oldest.
func TestDeviceEventsFromTheRing(t *testing.T) {
	f := newStreamFixture(t, StreamOptions{Recent: 80})
	get := func(id string) (events []event.Event, keptSince *time.Time) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, f.srv.URL+"/v1/devices/"+id+"/events", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+streamToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var body struct {
			Events    []json.RawMessage `json:"events"`
			KeptSince *time.Time        `json:"kept_since"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		require.NotNil(t, body.Events, "events is a list, never null")
		for _, raw := range body.Events {
			require.NoError(t, contract.ValidateEventClosed(raw))
			ev, err := event.Decode(raw)
			require.NoError(t, err)
			events = append(events, ev)
		}
		return events, body.KeptSince
	}
	events, since := get("dev-1")
	require.Empty(t, events)
	require.Nil(t, since, "nothing kept yet")

	first := f.publish(t, "dev-1", "other")
	f.sink.Publish(context.Background(), first[:1]) // published again (at-least-once)
	events, since = get("dev-1")
	require.Equal(t, first[:1], events)
	require.Equal(t, first[0].At, *since)

	// 90 more for dev-1: the newest 50 are answered; the ring of 80 forgot the oldest.
	var mine []event.Event
	for range 90 {
		mine = append(mine, f.publish(t, "dev-1")...)
	}
	events, since = get("dev-1")
	require.Len(t, events, deviceEventsShown)
	for i, e := range events {
		require.Equal(t, mine[len(mine)-1-i], e, "newest first")
	}
	require.True(t, since.After(first[0].At), "the first events were forgotten")
	events, _ = get("other")
	require.Empty(t, events, "forgotten")

	// An id with a slash, percent-encoded, is one path segment.
	f.publish(t, "site/7")
	events, _ = get("site%2F7")
	require.Len(t, events, 1)
}

// TestOneTokenHasItsShareOfStreams: a named token may hold PerToken live streams; its next is refused
// while another token still opens one, and a closed stream makes room again.
func TestOneTokenHasItsShareOfStreams(t *testing.T) {
	s := newEventStream(StreamOptions{PerToken: 2})
	a1, err := s.subscribe("dashboards")
	require.NoError(t, err)
	_, err = s.subscribe("dashboards")
	require.NoError(t, err)
	_, err = s.subscribe("dashboards")
	require.ErrorIs(t, err, errTooManyStreams)
	require.ErrorContains(t, err, `token "dashboards" has 2 open, its share`)
	_, err = s.subscribe("noc")
	require.NoError(t, err, "another token is not locked out")
	s.unsubscribe(a1)
	_, err = s.subscribe("dashboards")
	require.NoError(t, err, "room again after a stream closed")
}
