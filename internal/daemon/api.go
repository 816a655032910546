package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/alarm"
	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/correlate"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/history"
	"github.com/heartbeatd/heartbeatd/internal/holdback"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/silence"
	"github.com/heartbeatd/heartbeatd/internal/statuspage"
	"github.com/heartbeatd/heartbeatd/pkg/client"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// Silences is what the API needs from the silence store (*silence.Silences).
type Silences interface {
	Create(ctx context.Context, s silence.Silence) (silence.Silence, error)
	List(ctx context.Context) ([]silence.Silence, error)
	// End ends a silence early on behalf of act; false when there is none with that id.
	End(ctx context.Context, id string, act event.Act) (bool, error)
	// SilencedUntil is when the latest silence covering device (of type typ) ends; zero when none does.
	SilencedUntil(device, typ string, now time.Time) time.Time
}

// APIOptions wires the HTTP API to the running components.
type APIOptions struct {
	Store    *deadline.Store
	Silences Silences
	HoldBack func() holdback.Status
	// Health holds the last readiness checks; /readyz never runs a check itself.
	Health *Health
	// Notes are conditions /readyz names without failing (name → why), such as a Redis that may evict
	// deadlines; nil = none.
	Notes      func() map[string]string
	Reload     func() error
	OwnedSlots func() []int
	Timeout    func(typeName string) time.Duration // for last_seen = deadline − timeout
	WarnAfter  func(typeName string) time.Duration // warn_api.go; nil: no type warns
	// QuietUntil and QuietNow say which types are in a quiet interval and until when (docs/schedules.md);
	// nil = no schedules.
	QuietUntil func(typeName string, now time.Time) time.Time
	QuietNow   func(now time.Time) map[string]time.Time
	// KnownType says whether a type name is configured (registrations name only those).
	KnownType func(typeName string) bool
	// MaxImportBytes bounds an import's body; default maxImportBytes.
	MaxImportBytes int64
	// Token is an admin token named config.AdminTokenName, besides Tokens (tests set it alone).
	Token string
	// Tokens are the tokens the API admits (docs/access.md); none and no Token: the API is open to its
	// loopback listener.
	Tokens   []config.AccessToken
	Gatherer prometheus.Gatherer
	// Registerer takes heartbeatd_api_refused_total; nil = not registered.
	Registerer  prometheus.Registerer
	MaxBodySize int64
	// TypeCountsTTL is how long per-type counts (/v1/stats?by_type=true) are served from memory before
	// the next request scans the fleet again; default defaultTypeCountsTTL.
	TypeCountsTTL time.Duration
	// Outages lists the correlated outages (nil: correlation is off, the listing is empty).
	Outages *correlate.Correlator
	Now     func() time.Time
	Logger  *zap.Logger
	// Events publishes the operator acts (acked, deleted) through the daemon's sink, the one the alarm
	// loop uses, so the outputs that follow Kafka see them; nil = acts publish no event.
	Events *alarm.Acts
	// Stream feeds GET /v1/events/stream and GET /v1/devices/{id}/events; nil = one nothing feeds.
	Stream *EventStream
	// Advice is this replica's timeout advice (/v1/stats?advice=true); nil = none is offered.
	Advice func() ingest.TimeoutAdvice
	// History answers the incident list and availability (history_api.go); nil: none is kept.
	History *history.Store
	// Signals takes the signals posted over HTTP (signals.go); nil: the signal routes answer 503.
	Signals *ingest.Chain
	// SignalWait bounds a signal request's wait for Redis; default defaultSignalWait.
	SignalWait time.Duration
}

// defaultTypeCountsTTL: per-type counts scan every device, so they are at most this stale and cost at
// most one scan per this long, however many callers ask.
const defaultTypeCountsTTL = 5 * time.Second

// typeCountsTimeout bounds one scan; it runs on past the request that started it, for the others waiting.
const typeCountsTimeout = 50 * time.Second

type api struct {
	APIOptions
	log        *zap.Logger
	mux        *http.ServeMux
	refused    *prometheus.CounterVec // heartbeatd_api_refused_total{reason}
	badInput   *prometheus.CounterVec // heartbeatd_api_bad_input_total{reason}
	typeCounts typeCountsCache
	// batchesRead holds a place for each signal batch being submitted, once read (maxBatchesRead).
	batchesRead chan struct{}
}

// NewAPI returns the HTTP handler of docs/http-api.md.
func NewAPI(opts APIOptions) http.Handler {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxBodySize <= 0 {
		opts.MaxBodySize = config.DefaultMaxBodyBytes
	}
	if opts.MaxImportBytes <= 0 {
		opts.MaxImportBytes = maxImportBytes
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.TypeCountsTTL <= 0 {
		opts.TypeCountsTTL = defaultTypeCountsTTL
	}
	if opts.Stream == nil {
		opts.Stream = newEventStream(StreamOptions{})
	}
	if opts.SignalWait <= 0 {
		opts.SignalWait = defaultSignalWait
	}
	if opts.Token != "" {
		admin := config.HTTP{Token: opts.Token}.AccessTokens()
		opts.Tokens = append(admin, opts.Tokens...)
	}
	a := &api{APIOptions: opts, log: opts.Logger.With(zap.String("component", "http")), refused: newRefusedCounter(opts.Registerer),
		badInput:    newBadInputCounter(opts.Registerer),
		batchesRead: make(chan struct{}, maxBatchesRead)}
	mux := http.NewServeMux()
	a.mux = mux
	for _, rt := range a.routes() {
		h := rt.handler
		if rt.role != config.RoleNone {
			h = a.guard(rt)
		}
		mux.HandleFunc(rt.pattern, h)
	}
	return a
}

// route is one endpoint of the API.
type route struct {
	pattern string // http.ServeMux pattern, "METHOD /path/{param}"
	// role is the least role a token needs (docs/access.md#roles); RoleNone serves the route without a
	// token (probes and metrics, for orchestrators and scrapers, and the status page, which holds no data).
	role    config.Role
	scope   scopeRule // how a scoped token may use it
	handler http.HandlerFunc
}

// The roles, short, for the route table.
const (
	open    = config.RoleNone
	read    = config.RoleRead
	signal  = config.RoleSignal
	operate = config.RoleOperate
	admin   = config.RoleAdmin
)

// routes is every endpoint, in one table: NewAPI serves and guards it, TestOpenAPIDocumentsEveryRoute
// checks it against api/openapi.yaml both ways, and TestEveryRouteEveryRole walks it with every role.
func (a *api) routes() []route {
	return []route{
		{"GET /healthz", open, fleetWide, func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, map[string]string{"status": "alive"})
		}},
		{"GET /readyz", open, fleetWide, a.readyz},
		{"GET /metrics", open, fleetWide, promhttp.HandlerFor(a.Gatherer, promhttp.HandlerOpts{}).ServeHTTP},
		{"GET /{$}", open, fleetWide, statuspage.Handler().ServeHTTP}, // the page holds no data: it asks for the token
		{"POST /-/reload", admin, fleetWide, a.reload},
		{"GET /v1/whoami", read, filtered, a.whoami},
		{"GET /v1/devices/{id}", read, pathDevice, a.device},
		{"GET /v1/devices", read, filtered, a.devices},
		{"POST /v1/devices/{id}/ack", operate, pathDevice, a.ack},
		{"DELETE /v1/devices/{id}", operate, pathDevice, a.deleteDevice},
		{"GET /v1/stats", read, filtered, a.stats},
		{"PUT /v1/devices/{id}", admin, fleetWide, a.putDevice},
		{"POST /v1/devices:import", admin, fleetWide, a.importDevices},
		{"GET /v1/outages", read, filtered, a.outages},
		{"GET /v1/outages/{id...}", read, filtered, a.outage},
		{"POST /v1/dead/requeue", admin, fleetWide, a.requeue},
		{"POST /v1/silences", operate, filtered, a.createSilence},
		{"GET /v1/silences", read, filtered, a.listSilences},
		{"DELETE /v1/silences/{id}", operate, filtered, a.deleteSilence},
		{"GET /v1/events/stream", read, filtered, a.eventStream},
		{"GET /v1/devices/{id}/events", read, pathDevice, a.deviceEvents},
		{"GET /v1/devices/{id}/incidents", read, pathDevice, a.incidents},
		{"GET /v1/availability", read, filtered, a.availability},
		{"POST /v1/signals", signal, filtered, a.postSignals}, // signalsPath
		{"POST /v1/devices/{id}/signal", signal, pathDevice, a.postDeviceSignal},
	}
}

// routeMethods are the methods tried to fill a 405's Allow header.
var routeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// ServeHTTP routes a request, answering a path no route knows with a JSON 404 and a known path asked
// with the wrong method with a JSON 405 and its Allow header (RFC 9110 §15.5.6).
func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := a.mux.Handler(r); pattern != "" {
		a.mux.ServeHTTP(w, r) // sets the path values, which Handler does not
		return
	}
	var allow []string
	for _, m := range routeMethods {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := a.mux.Handler(probe); pattern != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		writeError(w, http.StatusNotFound, "no route "+r.URL.Path)
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", ")))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func (a *api) internal(w http.ResponseWriter, err error) {
	a.log.Error("request failed", zap.Error(err))
	writeError(w, http.StatusServiceUnavailable, err.Error())
}

// readyz answers from the last background check (Health): probes are unauthenticated, so they must cost
// the dependencies nothing, and their answer names what is not ready but shows the reason (addresses,
// broker errors) only to an unscoped token: they describe the installation, not a scope's devices
// (docs/access.md#scopes).
func (a *api) readyz(w http.ResponseWriter, r *http.Request) {
	rd, checked := a.Health.current()
	if !checked {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "starting"})
		return
	}
	c, known := a.authenticate(r)
	detail := known && c.Scope.Whole()
	body := map[string]any{}
	status := http.StatusOK
	for name, err := range rd.Checks {
		switch {
		case err == nil:
			body[name] = "ok"
		case detail:
			body[name] = err.Error()
		default:
			body[name] = "not ready"
		}
		if err != nil {
			status = http.StatusServiceUnavailable
		}
	}
	if a.Notes != nil {
		if notes := a.Notes(); len(notes) > 0 {
			shown := map[string]string{}
			for name, why := range notes {
				shown[name] = "see the log"
				if detail {
					shown[name] = why
				}
			}
			body["notes"] = shown
		}
	}
	if hb := a.HoldBack(); hb.Active || hb.Degraded {
		body["hold_back"] = hb
		if hb.Degraded {
			// Still 200: a monitor that resumed reporting after max_hold_back is working, only without
			// trusting silence; taking it out of service would silence it. The word and the metric say so.
			body["status"] = "degraded"
		}
	}
	writeJSON(w, status, body)
}

func (a *api) reload(w http.ResponseWriter, _ *http.Request) {
	if err := a.Reload(); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "reloaded"})
}

// DeviceView is the JSON of one device (docs/http-api.md): the API client's type, one definition for both.
type DeviceView = client.Device

func ptr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func (a *api) view(d deadline.Device) DeviceView {
	v := DeviceView{DeviceID: d.ID, DeviceType: d.Type, State: "unknown", Parent: d.Parent}
	dl := d.Deadline
	if d.Incident != nil {
		v.State = "interrupted"
		dl = d.Incident.DeadlineTime()
		if d.Incident.Next > 0 && d.Incident.InterruptedAt > 0 { // a held incident keeps since when it waits there
			v.InterruptedAt = ptr(time.UnixMilli(d.Incident.InterruptedAt))
		}
		v.Repeats = max(d.Incident.Next-1, 0)
		v.Acked, v.Exhausted, v.Parked = d.Incident.Acked, d.Incident.Exhausted, d.Parked
		v.Suppressed = d.Incident.Hold == deadline.HoldParent
		v.NextAlarm = ptr(d.NextAct)
		if d.Cause != nil {
			v.Cause, v.Reason = d.Cause.Kind, d.Cause.Reason
		}
	} else if !d.Deadline.IsZero() {
		v.State = "online"
	}
	if !dl.IsZero() {
		a.viewDeadline(&v, d, dl)
	}
	a.viewSchedules(&v, d)
	if ls := d.LastSeen(); !ls.IsZero() {
		// A deadline moved by a reported failure or an offline message is not the last signal + timeout:
		// the device last spoke when the cause says (the failure itself, or its last signal before the
		// broker's word), as its events say.
		v.LastSeen = ptr(ls)
	}
	if a.Silences != nil {
		v.SilencedUntil = ptr(a.Silences.SilencedUntil(d.ID, d.Type, a.Now()))
	}
	return v
}

func (a *api) device(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	d, found, err := a.Store.Device(r.Context(), id)
	if err != nil {
		a.internal(w, err)
		return
	}
	if !found {
		writeError(w, http.StatusNotFound, fmt.Sprintf("device %q is not known", id))
		return
	}
	views := []DeviceView{a.view(d)}
	if err := a.silencedByFacts(r.Context(), views, []deadline.Device{d}); err != nil {
		a.internal(w, err)
		return
	}
	if err := a.withAvailability(r, &views[0]); err != nil {
		a.internal(w, err)
		return
	}
	writeJSON(w, http.StatusOK, views[0])
}

func (a *api) devices(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	opts := deadline.ListOptions{Type: q.Get("type"), Cursor: q.Get("cursor"), Limit: 100}
	var labelName, labelValue string
	if v := q.Get("label"); v != "" {
		var err error
		if labelName, labelValue, err = labelFilter(v); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	switch q.Get("state") {
	case "", "online":
	case "interrupted":
		opts.Interrupted = true
	default:
		writeError(w, http.StatusBadRequest, "state must be online or interrupted")
		return
	}
	if scope := callerOf(r).Scope; scope.Type != "" {
		if opts.Type != "" && opts.Type != scope.Type { // no device of another type is in scope
			writeJSON(w, http.StatusOK, map[string]any{"devices": []DeviceView{}, "next_cursor": ""})
			return
		}
		opts.Type = scope.Type
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			writeError(w, http.StatusBadRequest, "limit must be a number from 1 to 10000")
			return
		}
		opts.Limit = n
	}
	page, next, err := a.Store.List(r.Context(), opts)
	if errors.Is(err, deadline.ErrBadCursor) {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err != nil {
		a.internal(w, err)
		return
	}
	if labelName != "" { // a page may come out shorter; the cursor still walks the whole fleet
		if page, err = a.withLabel(r.Context(), page, labelName, labelValue); err != nil {
			a.internal(w, err)
			return
		}
	}
	if scope := callerOf(r).Scope; scope.Label != "" {
		if page, err = a.withLabel(r.Context(), page, scope.Label, scope.Value); err != nil {
			a.internal(w, err)
			return
		}
	}
	views := make([]DeviceView, 0, len(page))
	for _, d := range page {
		views = append(views, a.view(d))
	}
	if err := a.silencedByFacts(r.Context(), views, page); err != nil {
		a.internal(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"devices": views, "next_cursor": next})
}

// requeue moves every parked claim back to due now; the slots' owners publish them again.
func (a *api) requeue(w http.ResponseWriter, r *http.Request) {
	n, err := a.Store.Requeue(r.Context())
	if err != nil {
		a.internal(w, err)
		return
	}
	a.log.Info("parked claims requeued", zap.Int("claims", n))
	writeJSON(w, http.StatusOK, map[string]int{"requeued": n})
}

// decodeOptionalBody is decodeBody for a body that may be left out (empty): v keeps its zero value then.
func (a *api) decodeOptionalBody(w http.ResponseWriter, r *http.Request, v any) bool {
	br := bufio.NewReader(r.Body)
	if _, err := br.Peek(1); errors.Is(err, io.EOF) {
		return true
	}
	r.Body = io.NopCloser(br)
	return a.decodeBody(w, r, v)
}

// decodeBody reads exactly one JSON object with known fields into v; on failure it has answered: 413
// when the body is larger than MaxBodySize, else 400.
func (a *api) decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var tooLarge *http.MaxBytesError
	if err == nil {
		if _, next := dec.Token(); !errors.Is(next, io.EOF) {
			err = errors.New("one JSON object expected, more follows it")
			if errors.As(next, &tooLarge) {
				err = next
			}
		}
	}
	switch {
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body: larger than %d bytes", tooLarge.Limit))
		return false
	case err != nil:
		writeError(w, http.StatusBadRequest, "body: "+err.Error())
		return false
	}
	return true
}
