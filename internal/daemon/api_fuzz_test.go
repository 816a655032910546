package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// FuzzAPI drives the real router on a real Redis with arbitrary methods, paths, queries, bodies and
// Authorization headers. Bad input must never panic, never answer 5xx (the dependencies are up), and
// every error must be a JSON {"error": "..."}; successes other than /metrics and 204 are JSON too.
// CI runs the seeds; go test -fuzz FuzzAPI ./internal/daemon explores.
func FuzzAPI(f *testing.F) {
	fx := newAPIFixture(f, "s3cret")
	for i := range 20 {
		fx.signal(f, fmt.Sprintf("dev-%d", i), []string{"", "gateway"}[i%2], fx.now.Add(-time.Duration(i)*10*time.Second))
	}
	fx.interrupt(f)

	for _, s := range []struct {
		method, path, query, body string
		authed                    bool
	}{
		{"GET", "/healthz", "", "", false},
		{"GET", "/readyz", "", "", false},
		{"GET", "/metrics", "", "", false},
		{"GET", "/v1/devices/dev-1", "", "", true},
		{"GET", "/v1/devices/dev-1", "", "", false},
		{"GET", "/v1/devices", "state=interrupted&type=gateway&limit=3&cursor=1.0", "", true},
		{"GET", "/v1/devices", "limit=-1&cursor=9999.18446744073709551615", "", true},
		{"GET", "/v1/stats", "by_type=true", "", true},
		{"POST", "/v1/devices/dev-9/ack", "", "", true},
		{"DELETE", "/v1/devices/dev-3", "", "", true},
		{"POST", "/v1/silences", "", `{"device_type":"gateway","for":"2h","comment":"roll-out"}`, true},
		{"POST", "/v1/silences", "", `{"device_id":"dev-1","until":"9999-12-31T23:59:59-23:59"}`, true},
		{"POST", "/v1/silences", "", `{"device_id":"dev-1","for":"2562047h"}`, true},
		{"POST", "/v1/silences", "", `{"device_id":"` + strings.Repeat("é", 300) + `","for":"1h"}`, true},
		{"POST", "/v1/silences", "", `null`, true},
		{"POST", "/v1/silences", "", `{"device_id":"a","for":"1h"}]`, true},
		{"GET", "/v1/silences", "", "", true},
		{"DELETE", "/v1/silences/nope", "", "", true},
		{"POST", "/-/reload", "", "", true},
		{"PUT", "/v1/stats", "", "", true},
		{"GET", "/v1/../v1/stats", "", "", true},
		{"GET", "/v1//devices/", "", "", true},
		{"OPTIONS", "/v1/devices/x", "", "", true},
		{"BREW", "/", "", "", false},
	} {
		f.Add(s.method, s.path, s.query, []byte(s.body), s.authed, "")
	}
	f.Add("GET", "/v1/stats", "", []byte(nil), false, "bearer s3cret")
	f.Add("GET", "/v1/stats", "", []byte(nil), false, "Bearer\x00s3cret")

	f.Fuzz(func(t *testing.T, method, path, query string, body []byte, authed bool, authorization string) {
		if !validMethod(method) {
			method = http.MethodGet
		}
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req := (&http.Request{Method: method, URL: &url.URL{Path: path, RawQuery: query}, Header: http.Header{},
			Host: "heartbeatd", Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}).WithContext(ctx)
		req.RequestURI = req.URL.RequestURI()
		if authed {
			authorization = "Bearer s3cret"
		}
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		rec := httptest.NewRecorder()
		fx.handler.ServeHTTP(rec, req)

		res := rec.Result()
		raw := rec.Body.Bytes()
		what := fmt.Sprintf("%s %q ? %q body %q → %d %s", method, path, query, body, res.StatusCode, raw)
		if res.StatusCode >= 500 {
			t.Fatalf("server error for bad input: %s", what)
		}
		if res.StatusCode >= 400 {
			if !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
				t.Fatalf("error without JSON: %s", what)
			}
			var e map[string]any
			if err := json.Unmarshal(raw, &e); err != nil || len(e) != 1 {
				t.Fatalf("error body is not {\"error\": ...}: %s", what)
			}
			if msg, ok := e["error"].(string); !ok || msg == "" {
				t.Fatalf("error body is not {\"error\": ...}: %s", what)
			}
			return
		}
		if res.StatusCode == http.StatusOK && !strings.HasPrefix(path, "/metrics") && !json.Valid(raw) {
			t.Fatalf("success without JSON: %s", what)
		}
	})
}

// validMethod reports whether m is an HTTP token (RFC 9110 §5.6.2), as the server would accept it.
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for _, c := range []byte(m) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}
