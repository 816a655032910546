package notify

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// pdEvent is a request of PagerDuty's Events API v2 as the recording server took it.
type pdEvent struct {
	RoutingKey  string `json:"routing_key"`
	EventAction string `json:"event_action"`
	DedupKey    string `json:"dedup_key"`
	Payload     *struct {
		Summary       string          `json:"summary"`
		Source        string          `json:"source"`
		Severity      string          `json:"severity"`
		Timestamp     string          `json:"timestamp"`
		Class         string          `json:"class"`
		CustomDetails json.RawMessage `json:"custom_details"`
	} `json:"payload"`
}

// hookRequest is a webhook request as the recording server took it.
type hookRequest struct {
	Method string
	Header http.Header
	Body   string
}

// receiverServer records the requests of the receivers' real protocols: PagerDuty's Events API v2 at
// /v2/enqueue (202 for a valid event, 400 with PagerDuty's error body for an invalid one), a Slack
// incoming webhook at /services/… (200 "ok", 400 "invalid_payload"), and a generic webhook at /hook.
// It can be made to fail: down answers 503 to everything, status answers that status to everything.
type receiverServer struct {
	*httptest.Server
	mu    sync.Mutex
	pd    []pdEvent
	slack []string
	hooks []hookRequest
	// down answers 503; status, when set, answers that status with answer as body.
	down   atomic.Bool
	status atomic.Int32
	answer atomic.Value
}

func newReceiverServer(t testing.TB) *receiverServer {
	s := &receiverServer{}
	s.answer.Store("")
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *receiverServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if s.down.Load() {
		http.Error(w, "service unavailable", http.StatusServiceUnavailable)
		return
	}
	if st := s.status.Load(); st != 0 {
		w.WriteHeader(int(st))
		_, _ = io.WriteString(w, s.answer.Load().(string))
		return
	}
	switch {
	case r.URL.Path == "/v2/enqueue":
		s.servePagerDuty(w, r, body)
	case strings.HasPrefix(r.URL.Path, "/services/"):
		var m struct {
			Text string `json:"text"`
		}
		if r.Method != http.MethodPost || json.Unmarshal(body, &m) != nil || m.Text == "" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, "invalid_payload")
			return
		}
		s.mu.Lock()
		s.slack = append(s.slack, m.Text)
		s.mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	case r.URL.Path == "/hook":
		s.mu.Lock()
		s.hooks = append(s.hooks, hookRequest{Method: r.Method, Header: r.Header.Clone(), Body: string(body)})
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		http.NotFound(w, r)
	}
}

// servePagerDuty checks an event as PagerDuty documents it: routing_key, an event_action of trigger,
// acknowledge or resolve, a dedup_key for the latter two, and for a trigger a payload with summary,
// source and a severity of critical, error, warning or info.
func (s *receiverServer) servePagerDuty(w http.ResponseWriter, r *http.Request, body []byte) {
	var e pdEvent
	var errs []string
	if r.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &e) != nil {
		errs = append(errs, "Event object must be JSON")
	}
	if e.RoutingKey == "" {
		errs = append(errs, "'routing_key' is missing or blank")
	}
	switch e.EventAction {
	case "trigger":
		if e.Payload == nil || e.Payload.Summary == "" || e.Payload.Source == "" ||
			!slices.Contains([]string{"critical", "error", "warning", "info"}, e.Payload.Severity) {
			errs = append(errs, "'payload' is invalid or missing")
		}
	case "acknowledge", "resolve":
		if e.DedupKey == "" {
			errs = append(errs, "'dedup_key' is missing or blank")
		}
	default:
		errs = append(errs, "'event_action' is invalid")
	}
	w.Header().Set("Content-Type", "application/json")
	if len(errs) > 0 {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "invalid event", "message": "Event object is invalid", "errors": errs})
		return
	}
	s.mu.Lock()
	s.pd = append(s.pd, e)
	s.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(map[string]string{"status": "success", "message": "Event processed", "dedup_key": e.DedupKey})
}

func (s *receiverServer) pagerDuty() []pdEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.pd)
}

func (s *receiverServer) slackTexts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.slack)
}

func (s *receiverServer) hookRequests() []hookRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.hooks)
}

// fail makes every request answer status with answer; 0 ends it.
func (s *receiverServer) fail(status int, answer string) {
	s.answer.Store(answer)
	s.status.Store(int32(status))
}
