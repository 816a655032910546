package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	contract "github.com/heartbeatd/heartbeatd/api"
	"github.com/heartbeatd/heartbeatd/internal/alarm"
	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/correlate"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/history"
	"github.com/heartbeatd/heartbeatd/internal/holdback"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/silence"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

const openAPIFile = "openapi.yaml"

// openAPIDoc is api/openapi.yaml, decoded, with a compiler for the schemas inside it.
type openAPIDoc struct {
	doc      map[string]any
	compiler *jsonschema.Compiler
	schemas  map[string]*jsonschema.Schema
}

func loadOpenAPI(t *testing.T) *openAPIDoc {
	t.Helper()
	doc, err := contract.Document(openAPIFile)
	require.NoError(t, err)
	c, err := contract.Compiler()
	require.NoError(t, err)
	return &openAPIDoc{doc: doc.(map[string]any), compiler: c, schemas: map[string]*jsonschema.Schema{}}
}

// at walks the document along a JSON Pointer ("/paths/~1v1~1stats/get").
func (d *openAPIDoc) at(ptr string) (any, bool) {
	var v any = d.doc
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")]; !ok {
			return nil, false
		}
	}
	return v, true
}

// deref follows a local $ref at ptr, returning where the object really is.
func (d *openAPIDoc) deref(ptr string) string {
	for {
		v, _ := d.at(ptr)
		ref, ok := v.(map[string]any)["$ref"].(string)
		if !ok {
			return ptr
		}
		ptr = strings.TrimPrefix(ref, "#")
	}
}

func (d *openAPIDoc) schema(t *testing.T, ptr string) *jsonschema.Schema {
	t.Helper()
	if s, ok := d.schemas[ptr]; ok {
		return s
	}
	s, err := d.compiler.Compile(contract.BaseURL + openAPIFile + "#" + ptr)
	require.NoError(t, err, ptr)
	d.schemas[ptr] = s
	return s
}

func pointerToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// operations are the documented "METHOD /path" pairs.
func (d *openAPIDoc) operations() []string {
	var ops []string
	for path, item := range d.doc["paths"].(map[string]any) {
		for method := range item.(map[string]any) {
			if slices.Contains([]string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}, method) {
				ops = append(ops, strings.ToUpper(method)+" "+path)
			}
		}
	}
	sort.Strings(ops)
	return ops
}

// documentedAs is a route pattern as the document names it: "GET /{$}" (the root only) is "GET /", and
// a wildcard taking the rest of the path ("{id...}") is a plain parameter.
func documentedAs(pattern string) string {
	return strings.ReplaceAll(strings.TrimSuffix(pattern, "{$}"), "...}", "}")
}

func operationPointer(op string) string {
	method, path, _ := strings.Cut(op, " ")
	return "/paths/" + pointerToken(path) + "/" + strings.ToLower(method)
}

// checkResponse fails t unless the response is one the document gives at ptr (a Response object):
// its headers are there and valid, its body is of a documented media type and valid against that
// schema, with no field the schema does not declare.
func (d *openAPIDoc) checkResponse(t *testing.T, what, ptr string, resp *http.Response, body []byte) {
	t.Helper()
	ptr = d.deref(ptr)
	r, _ := d.at(ptr)
	headers, _ := r.(map[string]any)["headers"].(map[string]any)
	for name := range headers {
		got := resp.Header.Get(name)
		require.NotEmpty(t, got, "%s: header %s", what, name)
		hptr := d.deref(ptr + "/headers/" + pointerToken(name))
		require.NoError(t, d.schema(t, hptr+"/schema").Validate(got), "%s: header %s", what, name)
	}
	content, _ := r.(map[string]any)["content"].(map[string]any)
	if len(content) == 0 {
		require.Empty(t, body, "%s: no body documented", what)
		return
	}
	mediaType, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	require.NoError(t, err, what)
	require.Contains(t, content, mediaType, "%s: media type", what)
	sptr := ptr + "/content/" + pointerToken(mediaType) + "/schema"
	var v any = string(body)
	if mediaType == "application/json" {
		v, err = jsonschema.UnmarshalJSON(bytes.NewReader(body))
		require.NoError(t, err, "%s: %s", what, body)
	}
	require.NoError(t, d.schema(t, sptr).Validate(v), "%s: %s", what, body)
	require.Empty(t, d.undeclared(sptr, v, ""), "%s: fields the document does not declare in %s", what, body)
}

// undeclared lists the object members of v that the schema at ptr (a JSON Pointer into the document)
// declares neither as a property nor through additionalProperties: the document allows them (clients
// must ignore what they do not know), but the code must not grow fields the document does not name.
func (d *openAPIDoc) undeclared(ptr string, v any, at string) []string {
	s, _ := d.at(ptr)
	sm, _ := s.(map[string]any)
	if ref, ok := sm["$ref"].(string); ok {
		if !strings.HasPrefix(ref, "#") {
			return nil // another document of api/: its own Closed validator checks it (contract.ValidateEventClosed)
		}
		return d.undeclared(strings.TrimPrefix(ref, "#"), v, at)
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		branches, ok := sm[kw].([]any)
		if !ok {
			continue
		}
		var first []string
		for i := range branches {
			out := d.undeclared(ptr+"/"+kw+"/"+strconv.Itoa(i), v, at)
			if len(out) == 0 {
				return nil
			}
			if first == nil {
				first = out
			}
		}
		return first
	}
	var out []string
	switch v := v.(type) {
	case map[string]any:
		props, _ := sm["properties"].(map[string]any)
		_, addl := sm["additionalProperties"].(map[string]any)
		for k, mv := range v {
			switch {
			case props[k] != nil:
				out = append(out, d.undeclared(ptr+"/properties/"+pointerToken(k), mv, at+"/"+k)...)
			case addl:
				out = append(out, d.undeclared(ptr+"/additionalProperties", mv, at+"/"+k)...)
			default:
				out = append(out, at+"/"+k)
			}
		}
	case []any:
		if _, ok := sm["items"]; ok {
			for i, iv := range v {
				out = append(out, d.undeclared(ptr+"/items", iv, at+"/"+strconv.Itoa(i))...)
			}
		}
	}
	return out
}

// Every route the API serves is documented, with the security it has, and every documented operation
// is served: the route table (routes) and the document cannot drift apart.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	d := loadOpenAPI(t)
	require.Equal(t, "3.1.0", d.doc["openapi"])
	a := NewAPI(APIOptions{Gatherer: prometheus.NewRegistry()}).(*api)
	var served []string
	for _, rt := range a.routes() {
		served = append(served, documentedAs(rt.pattern))

		op, ok := d.at(operationPointer(documentedAs(rt.pattern)))
		require.True(t, ok, "%s is served but not documented in api/%s", rt.pattern, openAPIFile)
		security, explicit := op.(map[string]any)["security"].([]any)
		if !explicit {
			security = d.doc["security"].([]any)
		}
		anonymous := len(security) == 0
		for _, req := range security {
			anonymous = anonymous || len(req.(map[string]any)) == 0
		}
		isOpen := rt.role == config.RoleNone
		require.Equal(t, isOpen, anonymous, "%s: open to callers without the token", rt.pattern)
		responses := op.(map[string]any)["responses"].(map[string]any)
		if !isOpen {
			require.Contains(t, responses, "401", "%s needs the token", rt.pattern)
			// 403 where some token can be refused: a role above read (the least), or a scoped token on a
			// route that covers the whole fleet.
			if rt.role > config.RoleRead || rt.scope == fleetWide {
				require.Contains(t, responses, "403", "%s needs the %s role", rt.pattern, rt.role)
			} else {
				require.NotContains(t, responses, "403", "%s: no token is refused it", rt.pattern)
			}
			require.Equal(t, rt.role.String(), op.(map[string]any)["x-role"], "%s: x-role, the role it needs", rt.pattern)
		}
	}
	sort.Strings(served)
	require.Equal(t, served, d.operations(), "documented operations are the served routes")

	// Request examples are valid requests.
	for _, op := range d.operations() {
		content, ok := d.at(operationPointer(op) + "/requestBody/content/application~1json")
		if !ok {
			continue
		}
		examples, _ := content.(map[string]any)["examples"].(map[string]any)
		for name, ex := range examples {
			s := d.schema(t, operationPointer(op)+"/requestBody/content/application~1json/schema")
			require.NoError(t, s.Validate(ex.(map[string]any)["value"]), "%s example %s", op, name)
		}
	}
}

// fullSilences is the silence store, full on demand.
type fullSilences struct {
	*silence.Silences
	full bool
}

func (s *fullSilences) Create(ctx context.Context, sl silence.Silence) (silence.Silence, error) {
	if s.full {
		return silence.Silence{}, fmt.Errorf("alarm: %w", silence.ErrTooMany)
	}
	return s.Silences.Create(ctx, sl)
}

// Every documented operation answers, and every answer — successes, errors of every documented kind,
// 404 and 405 of the router, 503 with Redis gone — is one the document gives, valid against its
// schema. Every response the document gives is seen at least once.
func TestOpenAPIResponsesMatchTheDocument(t *testing.T) {
	const token, scopedViewer, scopedSignaller, scopedOperator = "s3cret", "viewer-s3cret", "meters-s3cret", "site-ops-s3cret"
	d := loadOpenAPI(t)
	f := newAPIFixture(t, token)
	ctx := context.Background()
	silences := &fullSilences{Silences: f.silences}
	reloads := 0
	var redisErr error
	health := newHealth(func(context.Context) map[string]error {
		return map[string]error{"redis": redisErr, "events": nil, "clock": nil, "mqtt": nil}
	}, HealthOptions{Interval: time.Hour})
	health.refresh(ctx)
	holdBack := holdback.Status{Active: true, Since: f.now.Add(-time.Minute), Reason: "mqtt: disconnected",
		Degraded: true, Windows: []holdback.Window{{ID: "ingest/mqtt", Replica: "r1", Cause: holdback.CauseIngest,
			Scope: holdback.ScopeAll, From: f.now.Add(-time.Hour), Opened: f.now.Add(-time.Hour), Reason: "mqtt: disconnected"}}}
	// The incident history, with dev-1's interruption recorded: the API's ack adds to it.
	hist := history.New(history.Options{Client: f.rdb, Now: func() time.Time { return f.now }, History: config.History{GroupLabels: []string{"site"}}})
	require.NoError(t, hist.Record(ctx, []event.Event{event.New(event.Interrupted, "dev-1", "default", f.now.Add(-time.Minute),
		f.now.Add(-2*time.Minute), f.now.Add(-time.Minute), 0)}))
	opts := APIOptions{
		Store: f.store, Silences: silences, HoldBack: func() holdback.Status { return holdBack }, Health: health,
		Notes: func() map[string]string { return map[string]string{"redis_eviction": "maxmemory-policy allkeys-lru"} },
		Reload: func() error {
			if reloads++; reloads > 1 {
				return errors.New("types.gateway.timeout: must be positive")
			}
			return nil
		},
		OwnedSlots: func() []int { return []int{0, 1, 2, 3} },
		Timeout:    func(string) time.Duration { return time.Minute }, Token: token, Gatherer: prometheus.NewRegistry(),
		MaxBodySize: 1024, Now: func() time.Time { return f.now }, KnownType: func(n string) bool { return n == "gateway" || n == "default" },
		MaxImportBytes: 4096, Stream: newEventStream(StreamOptions{MaxClients: 1}),
		Tokens: []config.AccessToken{{Name: "viewer", Role: config.RoleRead, Scope: config.Scope{Label: "site", Value: "x"},
			Digest: sha256.Sum256([]byte(scopedViewer))},
			{Name: "meters", Role: config.RoleSignal, Scope: config.Scope{Type: "meter"}, Digest: sha256.Sum256([]byte(scopedSignaller))},
			{Name: "site-ops", Role: config.RoleOperate, Scope: config.Scope{Label: "site", Value: "x"},
				Digest: sha256.Sum256([]byte(scopedOperator))}},
		Signals: runChain(t, f.store, nil), SignalWait: 300 * time.Millisecond,
		Outages: correlate.New(correlate.Options{Client: f.rdb, Store: f.store,
			Correlation: config.Correlation{By: []string{"device_type"}, MinDevices: 2, Window: time.Second}}),
		History: hist, Events: alarm.NewActs(alarm.ActsOptions{Sink: history.Recording(&testenv.EventLog{}, hist)}),
	}
	opts.Advice = func() ingest.TimeoutAdvice {
		return ingest.TimeoutAdvice{Replica: "r1", Types: map[string]ingest.TypeAdvice{"default": {Timeout: ingest.Duration(time.Minute)},
			"gateway": {Timeout: ingest.Duration(time.Minute), Devices: 12, Samples: 480, P50: ingest.Duration(30 * time.Second),
				P99: ingest.Duration(31 * time.Second), SuggestedTimeout: ingest.Duration(100 * time.Second)}}}
	}
	srv := httptest.NewServer(NewAPI(opts))
	t.Cleanup(srv.Close)
	startingOpts := opts
	startingOpts.Health = newHealth(func(context.Context) map[string]error { return nil }, HealthOptions{})
	starting := httptest.NewServer(NewAPI(startingOpts))
	t.Cleanup(starting.Close)

	// Devices in every state: online, interrupted, parked.
	f.signal(t, "gw-1", "gateway", f.now)
	f.signal(t, "dev-1", "", f.now.Add(-2*time.Minute))
	f.interrupt(t)
	f.signal(t, "poison", "gateway", f.now.Add(-time.Minute))
	res, err := f.store.Claim(ctx, []int{0, 1, 2, 3}, deadline.ClaimOptions{Now: f.now, Lease: time.Minute, Batch: 10})
	require.NoError(t, err)
	require.Len(t, res.Claims, 1)
	st := res.Claims[0].State
	st.Failures, st.Reason = 10, "refused: event: publish to heartbeat.events: [10] Message Size Too Large"
	_, err = f.store.Settle(ctx, []deadline.Ack{{Device: "poison", Slot: res.Claims[0].Slot, Op: deadline.Park,
		Claimed: st.Deadline, State: st}}, deadline.RecordsOf(res.Claims))
	require.NoError(t, err)

	seen := map[string]bool{} // response pointers answered at least once
	// do calls an operation ("METHOD /pattern") at path and checks the answer against the document.
	do := func(op, path, tok, body string, want int) []byte {
		t.Helper()
		method, _, _ := strings.Cut(op, " ")
		resp, raw := request(t, srv.URL, method, path, tok, body)
		require.Equal(t, want, resp.StatusCode, "%s %s: %s", method, path, raw)
		ptr := operationPointer(op) + "/responses/" + strconv.Itoa(resp.StatusCode)
		_, documented := d.at(ptr)
		require.True(t, documented, "%s answered %d, which api/%s does not give", op, resp.StatusCode, openAPIFile)
		d.checkResponse(t, fmt.Sprintf("%s %s → %d", method, path, resp.StatusCode), ptr, resp, raw)
		seen[ptr] = true
		return raw
	}

	do("GET /healthz", "/healthz", "", "", http.StatusOK)
	do("GET /readyz", "/readyz", "", "", http.StatusOK)
	do("GET /readyz", "/readyz", token, "", http.StatusOK)
	do("GET /metrics", "/metrics", "", "", http.StatusOK)
	do("GET /", "/", "", "", http.StatusOK)
	do("POST /-/reload", "/-/reload", token, "", http.StatusOK)
	do("POST /-/reload", "/-/reload", token, "", http.StatusBadRequest)

	do("GET /v1/devices", "/v1/devices", token, "", http.StatusOK)
	do("GET /v1/devices", "/v1/devices?state=interrupted&limit=1", token, "", http.StatusOK)
	for _, bad := range []string{"state=asleep", "limit=0", "limit=x", "cursor=not-a-cursor"} {
		do("GET /v1/devices", "/v1/devices?"+bad, token, "", http.StatusBadRequest)
	}
	for _, dev := range []string{"gw-1", "dev-1", "poison"} {
		do("GET /v1/devices/{id}", "/v1/devices/"+dev, token, "", http.StatusOK)
	}
	do("GET /v1/devices/{id}", "/v1/devices/never-seen", token, "", http.StatusNotFound)
	do("POST /v1/devices/{id}/ack", "/v1/devices/dev-1/ack", token, "", http.StatusOK)
	do("POST /v1/devices/{id}/ack", "/v1/devices/gw-1/ack", token, "", http.StatusNotFound)
	do("POST /v1/devices/{id}/ack", "/v1/devices/dev-1/ack", token, `{"by":"alice","note":"site visit booked"}`, http.StatusOK)
	do("POST /v1/devices/{id}/ack", "/v1/devices/dev-1/ack", token, `{"colour":"red"}`, http.StatusBadRequest)
	do("POST /v1/devices/{id}/ack", "/v1/devices/dev-1/ack", token, `{"note":"`+strings.Repeat("x", 2000)+`"}`, http.StatusRequestEntityTooLarge)
	incidents := do("GET /v1/devices/{id}/incidents", "/v1/devices/dev-1/incidents?limit=1", token, "", http.StatusOK)
	require.Contains(t, string(incidents), `"acked":{"by":"http.token"`, "the API's first ack is in the incident")
	do("GET /v1/devices/{id}/incidents", "/v1/devices/dev-1/incidents?cursor=x", token, "", http.StatusBadRequest)
	do("GET /v1/devices/{id}/incidents", "/v1/devices/dev-1/incidents", scopedViewer, "", http.StatusNotFound)
	do("GET /v1/availability", "/v1/availability?window=24h&group_by=device_type", token, "", http.StatusOK)
	require.Contains(t, string(do("GET /v1/stats", "/v1/stats?group_by=device_type", token, "", http.StatusOK)), `"by_group":{"group_by":"device_type","interrupted":{"default":1}}`)
	do("GET /v1/stats", "/v1/stats?group_by=label.site", scopedViewer, "", http.StatusOK)
	do("GET /v1/stats", "/v1/stats?group_by=colour", token, "", http.StatusBadRequest)
	do("GET /v1/devices/{id}/events", "/v1/devices/dev-1/events", scopedViewer, "", http.StatusNotFound)
	do("GET /v1/availability", "/v1/availability", scopedViewer, "", http.StatusOK)
	do("GET /v1/availability", "/v1/availability?group_by=label.room", token, "", http.StatusBadRequest)
	outage := correlate.Outage{ID: "outage:device_type:gateway/1795340000000", Group: event.Group{By: "device_type", Value: "gateway"},
		State: "open", StartedAt: f.now.UTC(), Count: 60, Silent: 58, Sample: []string{"gw-7", "gw-9"}}
	view, err := json.Marshal(outage)
	require.NoError(t, err)
	// Stored without members, as a release before them stored it (in the correlator's hash of open
	// outages, spelled out here as that release wrote it): its count is the floor shown.
	require.NoError(t, f.rdb.HSet(ctx, "hb:outages:open", outage.ID, view).Err())
	require.Contains(t, string(do("GET /v1/outages", "/v1/outages", token, "", http.StatusOK)), `"members":60`)
	do("GET /v1/outages/{id}", "/v1/outages/"+outage.ID, token, "", http.StatusOK)
	do("GET /v1/outages/{id}", "/v1/outages/outage:device_type:nothing/1", token, "", http.StatusNotFound)
	do("GET /v1/stats", "/v1/stats", token, "", http.StatusOK)
	// A scoped token (labels.site=x): its subset of the stats, no outage grouped by type.
	do("GET /v1/stats", "/v1/stats?by_type=true&advice=true", scopedViewer, "", http.StatusOK)
	require.JSONEq(t, `{"outages":[]}`, string(do("GET /v1/outages", "/v1/outages", scopedViewer, "", http.StatusOK)))
	do("GET /v1/outages/{id}", "/v1/outages/"+outage.ID, scopedViewer, "", http.StatusNotFound)
	do("GET /v1/stats", "/v1/stats?by_type=true", token, "", http.StatusOK)
	require.Contains(t, string(do("GET /v1/stats", "/v1/stats?advice=true", token, "", http.StatusOK)), `"suggested_timeout":"1m40s"`)
	do("POST /v1/dead/requeue", "/v1/dead/requeue", token, "", http.StatusOK)

	do("POST /v1/silences", "/v1/silences", token, `{"device_type":"gateway","for":"2h","comment":"firmware roll-out"}`, http.StatusCreated)
	until := f.now.Add(time.Hour).UTC().Format(time.RFC3339)
	created := do("POST /v1/silences", "/v1/silences", token, `{"device_id":"gw-1","until":"`+until+`"}`, http.StatusCreated)
	do("POST /v1/silences", "/v1/silences", scopedOperator, `{"device_id":"gw-1","for":"1h"}`, http.StatusNotFound)
	do("GET /v1/devices/{id}", "/v1/devices/gw-1", token, "", http.StatusOK) // silenced_until set
	for _, bad := range []string{`{"for":"2h"}`, `{"device_id":"a","for":"soon"}`, `{"device_id":"a","for":"1h","colour":"red"}`, `not json`} {
		do("POST /v1/silences", "/v1/silences", token, bad, http.StatusBadRequest)
	}
	do("POST /v1/silences", "/v1/silences", token, `{"device_id":"`+strings.Repeat("x", 2000)+`","for":"1h"}`, http.StatusRequestEntityTooLarge)
	silences.full = true
	do("POST /v1/silences", "/v1/silences", token, `{"device_id":"a","for":"1h"}`, http.StatusConflict)
	silences.full = false
	do("GET /v1/silences", "/v1/silences", token, "", http.StatusOK)
	var sil silence.Silence
	require.NoError(t, json.Unmarshal(created, &sil))
	id := sil.ID
	do("DELETE /v1/silences/{id}", "/v1/silences/"+id+"?by="+strings.Repeat("x", 300), token, "", http.StatusBadRequest)
	do("DELETE /v1/silences/{id}", "/v1/silences/"+id+"?by=alice&note=done", token, "", http.StatusNoContent)
	do("DELETE /v1/silences/{id}", "/v1/silences/"+id, token, "", http.StatusNotFound)
	do("DELETE /v1/devices/{id}", "/v1/devices/gw-1?note="+strings.Repeat("x", 1100), token, "", http.StatusBadRequest)
	do("PUT /v1/devices/{id}", "/v1/devices/meter-1", token, `{"device_type":"gateway","timeout":"90s","parent":"gw-1","labels":{"site":"berlin"}}`, http.StatusOK)
	do("GET /v1/devices", "/v1/devices?label=site=berlin", token, "", http.StatusOK)
	do("GET /v1/devices", "/v1/devices?label=site", token, "", http.StatusBadRequest)
	for _, bad := range []string{`{"device_type":"no-such-type"}`, `{"timeout":"5ms"}`, `{"parent":"meter-1"}`, `{"labels":{"1x":"a"}}`} {
		do("PUT /v1/devices/{id}", "/v1/devices/meter-1", token, bad, http.StatusBadRequest)
	}
	do("PUT /v1/devices/{id}", "/v1/devices/meter-1", token, `{"labels":{"a":"`+strings.Repeat("x", 2000)+`"}}`, http.StatusRequestEntityTooLarge)
	importAs := func(contentType, body string, want int) {
		t.Helper()
		req, err := newRequest("POST", srv.URL+"/v1/devices:import", token, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", contentType)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, "%s", raw)
		ptr := operationPointer("POST /v1/devices:import") + "/responses/" + strconv.Itoa(resp.StatusCode)
		d.checkResponse(t, "POST /v1/devices:import → "+strconv.Itoa(resp.StatusCode), ptr, resp, raw)
		seen[ptr] = true
	}
	importAs("application/x-ndjson", `{"device_id":"m-2","labels":{"site":"oslo"}}`+"\n"+`{"device_id":""}`+"\n", http.StatusOK)
	importAs("text/csv", "device_id,timeout,labels\nm-3,2m,site=oslo;floor=2\n", http.StatusOK)
	importAs("text/csv", "colour\nred\n", http.StatusBadRequest)
	importAs("application/xml", "<devices/>", http.StatusUnsupportedMediaType)
	importAs("text/csv", "device_id\n"+strings.Repeat("m-5\n", 2000), http.StatusRequestEntityTooLarge)
	do("DELETE /v1/devices/{id}", "/v1/devices/gw-1", token, "", http.StatusNoContent)
	do("DELETE /v1/devices/{id}", "/v1/devices/gw-1", token, "", http.StatusNotFound)

	// The recent events and the live stream (read up to its first frame: it does not end).
	at := f.now.UTC()
	acked := event.New(event.Acked, "dev-1", "default", at, at.Add(-time.Minute), at, 0)
	acked.By, acked.Note = "ops", "known"
	opts.Stream.Observe([]event.Event{event.New(event.Interrupted, "dev-1", "default", at, at.Add(-time.Minute), at, 0), acked})
	recent := do("GET /v1/devices/{id}/events", "/v1/devices/dev-1/events", token, "", http.StatusOK)
	var kept struct{ Events []json.RawMessage }
	require.NoError(t, json.Unmarshal(recent, &kept))
	require.Len(t, kept.Events, 2)
	for _, e := range kept.Events {
		require.NoError(t, contract.ValidateEventClosed(e))
	}
	do("GET /v1/devices/{id}/events", "/v1/devices/never-seen/events", token, "", http.StatusOK)
	streamCtx, endStream := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(streamCtx, http.MethodGet, srv.URL+"/v1/events/stream", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	first := make([]byte, len(": connected\n\n"))
	_, err = io.ReadFull(resp.Body, first)
	require.NoError(t, err)
	ptr := operationPointer("GET /v1/events/stream") + "/responses/200"
	d.checkResponse(t, "GET /v1/events/stream", ptr, resp, first)
	seen[ptr] = true
	do("GET /v1/events/stream", "/v1/events/stream", token, "", http.StatusServiceUnavailable) // one stream at most here
	endStream()
	_ = resp.Body.Close()

	do("GET /v1/whoami", "/v1/whoami", token, "", http.StatusOK)

	// Signals over HTTP: a batch with a bad line, one past the limit; one device's signal.
	do("POST /v1/signals", "/v1/signals", token, "{\"device_id\":\"http-1\"}\n{\"device_id\":\n", http.StatusOK)
	do("POST /v1/signals", "/v1/signals", token, `[{"device_id":"http-1"}]`, http.StatusOK)
	do("POST /v1/signals", "/v1/signals", token, strings.Repeat("{}\n", ingest.MaxBatchSignals+1), http.StatusRequestEntityTooLarge)
	do("POST /v1/devices/{id}/signal", "/v1/devices/http-2/signal", token, "", http.StatusNoContent)
	do("POST /v1/devices/{id}/signal", "/v1/devices/http-2/signal", token, `{"type":"gateway","ts":"2026-11-22T10:00:00Z"}`, http.StatusNoContent)
	do("POST /v1/devices/{id}/signal", "/v1/devices/http-2/signal", token, `{"device_id":"http-3"}`, http.StatusBadRequest)
	do("POST /v1/devices/{id}/signal", "/v1/devices/http-2/signal", token, strings.Repeat("x", 2000), http.StatusRequestEntityTooLarge)
	do("POST /v1/devices/{id}/signal", "/v1/devices/never-seen/signal", scopedSignaller, "", http.StatusNotFound)

	// Without the token every route that needs it answers 401, as documented; a scoped read token is
	// refused (403) every route above read and every fleet-wide one (only admin routes are).
	a := NewAPI(opts).(*api)
	for _, rt := range a.routes() {
		if rt.role == config.RoleNone {
			continue
		}
		op := documentedAs(rt.pattern)
		path := strings.ReplaceAll(strings.SplitN(op, " ", 2)[1], "{id}", "x")
		do(op, path, "", "", http.StatusUnauthorized)
		do(op, path, "wrong", "", http.StatusUnauthorized)
		if rt.role > config.RoleRead || rt.scope == fleetWide {
			do(op, path, scopedViewer, "", http.StatusForbidden)
		}
	}

	// The router's own answers: an unknown path, a known path with another method.
	resp, raw := request(t, srv.URL, "GET", "/v2/nothing", token, "")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	d.checkResponse(t, "GET /v2/nothing", "/components/responses/NotFound", resp, raw)
	resp, raw = request(t, srv.URL, "PUT", "/v1/stats", token, "")
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	d.checkResponse(t, "PUT /v1/stats", "/components/responses/MethodNotAllowed", resp, raw)

	// Not ready: a failing check, and no check run yet.
	redisErr = errors.New("dial tcp 127.0.0.1:6379: connection refused")
	health.refresh(ctx)
	do("GET /readyz", "/readyz", "", "", http.StatusServiceUnavailable)
	resp, raw = request(t, starting.URL, "GET", "/readyz", "", "")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	d.checkResponse(t, "GET /readyz (starting)", operationPointer("GET /readyz")+"/responses/503", resp, raw)
	require.JSONEq(t, `{"status":"starting"}`, string(raw))

	// Every type index taken: a registration whose own timeout needs a new one answers 507.
	full := make([]any, 0, 2*deadline.MaxTypes)
	for i := range deadline.MaxTypes {
		full = append(full, fmt.Sprintf("default@%s", time.Duration(1000+i)*time.Second), i)
	}
	require.NoError(t, f.rdb.HSet(ctx, f.store.Keys().Types(), full...).Err())
	do("PUT /v1/devices/{id}", "/v1/devices/valve-7", token, `{"timeout":"7s"}`, http.StatusInsufficientStorage)

	// Redis gone: every operation that needs it answers 503.
	require.NoError(t, f.rdb.Close())
	do("GET /v1/devices", "/v1/devices", token, "", http.StatusServiceUnavailable)
	do("GET /v1/devices/{id}", "/v1/devices/dev-1", token, "", http.StatusServiceUnavailable)
	do("POST /v1/devices/{id}/ack", "/v1/devices/dev-1/ack", token, "", http.StatusServiceUnavailable)
	do("DELETE /v1/devices/{id}", "/v1/devices/dev-1", token, "", http.StatusServiceUnavailable)
	do("GET /v1/stats", "/v1/stats", token, "", http.StatusServiceUnavailable)
	do("GET /v1/outages", "/v1/outages", token, "", http.StatusServiceUnavailable)
	do("GET /v1/devices/{id}/incidents", "/v1/devices/dev-1/incidents", token, "", http.StatusServiceUnavailable)
	do("GET /v1/devices/{id}/events", "/v1/devices/dev-1/events", scopedViewer, "", http.StatusServiceUnavailable)
	do("GET /v1/availability", "/v1/availability", token, "", http.StatusServiceUnavailable)
	do("PUT /v1/devices/{id}", "/v1/devices/dev-1", token, `{}`, http.StatusServiceUnavailable)
	importAs("text/csv", "device_id\nm-4\n", http.StatusServiceUnavailable)
	do("GET /v1/outages/{id}", "/v1/outages/x", token, "", http.StatusServiceUnavailable)
	do("POST /v1/dead/requeue", "/v1/dead/requeue", token, "", http.StatusServiceUnavailable)
	do("POST /v1/silences", "/v1/silences", token, `{"device_id":"a","for":"1h"}`, http.StatusServiceUnavailable)
	do("GET /v1/silences", "/v1/silences", token, "", http.StatusServiceUnavailable)
	do("DELETE /v1/silences/{id}", "/v1/silences/x", token, "", http.StatusServiceUnavailable)
	do("POST /v1/signals", "/v1/signals", token, `{"device_id":"http-1"}`, http.StatusServiceUnavailable)
	do("POST /v1/devices/{id}/signal", "/v1/devices/http-2/signal", token, "", http.StatusServiceUnavailable)

	// Every response the document gives was seen.
	for _, op := range d.operations() {
		responses, _ := d.at(operationPointer(op) + "/responses")
		for status := range responses.(map[string]any) {
			ptr := operationPointer(op) + "/responses/" + status
			require.True(t, seen[ptr], "%s: response %s is documented but no case answered it", op, status)
		}
	}
}
