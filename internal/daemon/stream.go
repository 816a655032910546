package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/defaults"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// Defaults of StreamOptions.
const (
	defaultStreamClients   = 64
	defaultStreamBuffer    = 1024
	defaultStreamKeepalive = 15 * time.Second
	defaultRecentEvents    = 10000
	// deviceEventsShown is the most events GET /v1/devices/{id}/events answers with.
	deviceEventsShown = 50
)

// streamWriteTimeout bounds one write to a live stream: a client that stopped reading (its TCP window
// full) fails the write and frees its handler instead of holding it for ever.
const streamWriteTimeout = 10 * time.Second

// streamBatch is the most frames written between two flushes, so a busy stream still flushes often.
const streamBatch = 256

// errTooManyStreams is subscribe's answer beyond StreamOptions.MaxClients.
var errTooManyStreams = errors.New("daemon: too many live streams")

// errStreamClosed is subscribe's answer once the server is shutting down.
var errStreamClosed = errors.New("daemon: live streams closed")

// StreamOptions configure an EventStream.
type StreamOptions struct {
	MaxClients int           // concurrent live streams; beyond it GET /v1/events/stream answers 503
	PerToken   int           // concurrent live streams of one named token (http.max_streams_per_token; 0 = MaxClients)
	Buffer     int           // events queued per stream; a stream that falls this far behind is dropped
	Keepalive  time.Duration // how often an idle stream gets a comment, so proxies keep it open
	Recent     int           // events kept in memory for GET /v1/devices/{id}/events
	Registerer prometheus.Registerer
	Logger     *zap.Logger
}

// EventStream is the observer behind the status page: it keeps the last events this replica published
// (Kafka acknowledged them) in a ring for the device drawer, and fans them out to the live streams of
// GET /v1/events/stream. Observe never blocks the alarm path: each stream has a bounded queue, and a
// stream whose queue is full is dropped (its client reconnects and reloads what it shows).
type EventStream struct {
	opts StreamOptions
	log  *zap.Logger

	streams atomic.Int32 // len(clients), read without the lock by Observe

	mu      sync.Mutex
	clients map[*streamClient]struct{}
	byToken map[string]int // open streams per named token
	closed  bool
	ring    []event.Event // the last events, up to opts.Recent; once full, the oldest is at next
	next    int

	open    prometheus.Gauge
	dropped prometheus.Counter
}

// streamClient is one live stream: the frames queued for it, and why its queue was closed.
type streamClient struct {
	token   string // the named token that opened it; "" without tokens
	frames  chan streamFrame
	dropped bool // set before frames is closed when the stream fell behind; read after the close
}

// newEventStream returns an EventStream; its metrics are registered with opts.Registerer when set.
func newEventStream(opts StreamOptions) *EventStream {
	opts.MaxClients = defaults.Positive(opts.MaxClients, defaultStreamClients)
	opts.Buffer = defaults.Positive(opts.Buffer, defaultStreamBuffer)
	opts.Keepalive = defaults.Positive(opts.Keepalive, defaultStreamKeepalive)
	opts.Recent = defaults.Positive(opts.Recent, defaultRecentEvents)
	opts.Logger = cmp.Or(opts.Logger, zap.NewNop())
	s := &EventStream{opts: opts, log: opts.Logger.With(zap.String("component", "stream")),
		clients: map[*streamClient]struct{}{}, byToken: map[string]int{},
		open: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "stream_clients",
			Help: "Live event streams open (GET /v1/events/stream, the status page)."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "heartbeatd", Name: "stream_dropped_total",
			Help: "Live event streams closed because their client fell behind by a whole buffer."}),
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(s.open, s.dropped)
	}
	return s
}

// streamFrame is one event framed for the live streams, with what a scoped stream filters it by.
type streamFrame struct {
	data               []byte
	kind               event.Kind
	device, deviceType string
	group              *event.Group
}

// Observe keeps events and queues them for every live stream (event.Observer). It holds the lock only
// for copies and non-blocking sends; the events are encoded once, and only while someone listens.
func (s *EventStream) Observe(events []event.Event) {
	var frames []streamFrame
	if s.streams.Load() > 0 {
		frames = make([]streamFrame, 0, len(events))
		for _, e := range events {
			b, err := e.MarshalJSON()
			if err != nil {
				continue // an Event always encodes; nothing to show for one that does not
			}
			frames = append(frames, streamFrame{data: sseData(b), kind: e.Kind, device: e.DeviceID, deviceType: e.DeviceType, group: e.Group})
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range events {
		if len(s.ring) < s.opts.Recent {
			s.ring = append(s.ring, e)
			continue
		}
		s.ring[s.next] = e
		s.next = (s.next + 1) % len(s.ring)
	}
	if len(frames) == 0 {
		return
	}
	for c := range s.clients {
	send:
		for _, f := range frames {
			select {
			case c.frames <- f:
			default:
				s.dropLocked(c, true)
				break send
			}
		}
	}
}

// sseData frames one JSON value as a Server-Sent Event of the default type ("message").
func sseData(b []byte) []byte {
	f := make([]byte, 0, len(b)+8)
	f = append(f, "data: "...)
	f = append(f, b...)
	return append(f, '\n', '\n')
}

// dropLocked ends c's stream: its handler writes what is left, then the reason. Callers hold s.mu.
func (s *EventStream) dropLocked(c *streamClient, behind bool) {
	if _, ok := s.clients[c]; !ok {
		return
	}
	delete(s.clients, c)
	if s.byToken[c.token]--; s.byToken[c.token] <= 0 {
		delete(s.byToken, c.token)
	}
	s.streams.Store(int32(len(s.clients)))
	s.open.Set(float64(len(s.clients)))
	c.dropped = behind
	close(c.frames)
	if behind {
		s.dropped.Inc()
		s.log.Info("live stream dropped: its client fell behind", zap.Int("buffer", s.opts.Buffer))
	}
}

// subscribe opens a stream for the named token ("" without tokens), within MaxClients in all and
// PerToken for the token, so one token cannot take every stream from the others.
func (s *EventStream) subscribe(token string) (*streamClient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errStreamClosed
	}
	if len(s.clients) >= s.opts.MaxClients {
		return nil, errTooManyStreams
	}
	if token != "" && s.opts.PerToken > 0 && s.byToken[token] >= s.opts.PerToken {
		return nil, fmt.Errorf("%w: token %q has %d open, its share (http.max_streams_per_token)", errTooManyStreams, token, s.opts.PerToken)
	}
	c := &streamClient{token: token, frames: make(chan streamFrame, s.opts.Buffer)}
	s.clients[c] = struct{}{}
	s.byToken[token]++
	s.streams.Store(int32(len(s.clients)))
	s.open.Set(float64(len(s.clients)))
	return c, nil
}

func (s *EventStream) unsubscribe(c *streamClient) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked(c, false)
}

// Close ends every live stream and refuses new ones: http.Server.Shutdown waits for handlers, and a
// stream's would otherwise run until its client left. Registered with the server's RegisterOnShutdown.
func (s *EventStream) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.clients {
		s.dropLocked(c, false)
	}
}

// recent returns device's kept events, newest first, at most limit, each id once (at-least-once
// delivery may have published one twice), and the time of the oldest event kept (zero while none is):
// what the ring cannot tell is older than that.
func (s *EventStream) recent(device string, limit int) ([]event.Event, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.ring)
	var oldest time.Time
	if n > 0 {
		oldest = s.ring[s.next].At // next is 0 until the ring is full
	}
	out := []event.Event{}
	seen := map[string]bool{}
	for i := 1; i <= n && len(out) < limit; i++ {
		e := s.ring[(s.next-i+n)%n]
		if e.DeviceID == device && !seen[e.ID] {
			seen[e.ID] = true
			out = append(out, e)
		}
	}
	return out, oldest
}

// eventStream serves GET /v1/events/stream: Server-Sent Events, one `data:` line per event Kafka
// acknowledged on this replica (for a scoped token, those of its scope: streamScope), `: keepalive`
// comments while idle, and `event: dropped` before the server closes a stream that fell behind.
func (a *api) eventStream(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx and the like would hold the events back
	if r.Method == http.MethodHead {
		return // the headers only: no stream taken
	}
	c, err := a.Stream.subscribe(callerOf(r).Name)
	if err != nil {
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	defer a.Stream.unsubscribe(c)
	rc := http.NewResponseController(w)
	// The server's WriteTimeout is set for ordinary answers; a stream lives longer. Each write below
	// sets its own deadline instead.
	if err := rc.SetWriteDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		a.log.Debug("live stream: clearing the write deadline", zap.Error(err))
	}
	w.WriteHeader(http.StatusOK)
	write := func(frames ...streamFrame) error {
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		for _, f := range frames {
			if _, err := w.Write(f.data); err != nil {
				return fmt.Errorf("daemon: live stream: %w", err)
			}
		}
		return rc.Flush()
	}
	if write(streamFrame{data: []byte(": connected\n\n")}) != nil {
		return
	}
	keepalive := time.NewTicker(a.Stream.opts.Keepalive)
	defer keepalive.Stop()
	// Read when a client's scope needs labels: a stream without a store (its tests) never asks.
	labels := func(ctx context.Context, devices []string) ([]map[string]string, error) {
		return a.Store.Registry().Labels(ctx, devices)
	}
	scope := streamScope{scope: callerOf(r).Scope, labels: labels}
	batch := make([]streamFrame, 0, streamBatch)
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keepalive.C:
			if write(streamFrame{data: []byte(": keepalive\n\n")}) != nil {
				return
			}
		case f, ok := <-c.frames:
			if !ok {
				if c.dropped {
					_ = write(streamFrame{data: []byte("event: dropped\ndata: {\"reason\":\"the client fell behind; reload and reconnect\"}\n\n")})
				}
				return
			}
			batch = append(batch[:0], f)
		more:
			for len(batch) < streamBatch {
				select {
				case f, ok := <-c.frames:
					if !ok {
						break more // the next round of the loop sees the close
					}
					batch = append(batch, f)
				default:
					break more
				}
			}
			kept, err := scope.keep(r.Context(), batch)
			if err != nil { // the client reconnects, as after any closed stream
				a.log.Warn("live stream closed: reading its devices' labels", zap.Error(err))
				return
			}
			if write(kept...) != nil {
				return
			}
		}
	}
}

// deviceEvents serves GET /v1/devices/{id}/events: the device's recent events this replica published.
func (a *api) deviceEvents(w http.ResponseWriter, r *http.Request) {
	events, oldest := a.Stream.recent(r.PathValue("id"), deviceEventsShown)
	writeJSON(w, http.StatusOK, map[string]any{"events": events, "kept_since": ptr(oldest)})
}
