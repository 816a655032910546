package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/notify"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// receiverDown is how long the receiver fails in TestChaosNotifyReceiverDown under `make test`: the
// "minutes" of docs/notifications.md's promise scaled down to what CI affords. Long enough for the
// notifiers' backoff to grow to 8–16 s and for both replicas to be SIGKILLed and restarted inside it.
const receiverDown = 25 * time.Second

// receiverOutage is how long the receiver fails: HB_CHAOS_LONG_OUTAGE when set (`make chaos`: 4 min,
// minutes indeed), else receiverDown.
func receiverOutage(t *testing.T) time.Duration {
	if os.Getenv("HB_CHAOS_LONG_OUTAGE") == "" {
		return receiverDown
	}
	return longKafkaOutage(t)
}

// notifyKills is how many times TestChaosNotifyReceiverDown SIGKILLs a notifier-running replica: each
// kill may send a notification once more (read again from the last commit, or a retry whose lease ran
// out), so no notification may arrive more than 1+notifyKills times.
const notifyKills = 2

// pdRecorder is a receiver shaped as PagerDuty's Events API v2 (POST /v2/enqueue, 202 on success) that
// records every event it accepted. While failing it answers 500 for the first half of the outage and
// then hangs up without an answer (a network error), the two ways a receiver is down.
type pdRecorder struct {
	*httptest.Server
	failing atomic.Bool
	hangUp  atomic.Bool
	refused atomic.Int64
	mu      sync.Mutex
	got     []pdMessage
}

// pdMessage is what the scenario reads of an accepted event.
type pdMessage struct {
	Action   string `json:"event_action"`
	DedupKey string `json:"dedup_key"`
	Payload  *struct {
		Source  string `json:"source"`
		Details struct {
			Event struct {
				LastSeen time.Time `json:"last_seen"`
			} `json:"event"`
		} `json:"custom_details"`
	} `json:"payload"`
}

func newPDRecorder(t *testing.T) *pdRecorder {
	t.Helper()
	r := &pdRecorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

func (r *pdRecorder) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if r.failing.Load() {
		r.refused.Add(1)
		if hj, ok := w.(http.Hijacker); ok && r.hangUp.Load() {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	var m pdMessage
	if req.URL.Path != "/v2/enqueue" || json.Unmarshal(body, &m) != nil || m.DedupKey == "" ||
		(m.Action == "trigger" && (m.Payload == nil || m.Payload.Source == "")) {
		http.Error(w, `{"status":"invalid event"}`, http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.got = append(r.got, m)
	r.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(w, `{"status":"success","message":"Event processed"}`)
}

func (r *pdRecorder) messages() []pdMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]pdMessage(nil), r.got...)
}

// triggered reports whether device's incident reached the receiver.
func (r *pdRecorder) triggered(device string) bool {
	for _, m := range r.messages() {
		if m.Action == "trigger" && m.Payload.Source == device {
			return true
		}
	}
	return false
}

// incidentKey names one incident of a device: every event of an incident carries the device's last
// signal before it.
func incidentKey(device string, lastSeen time.Time) string {
	return device + "@" + strconv.FormatInt(lastSeen.UnixMilli(), 10)
}

// notifyCount is the receiver's messages counted against the incidents the events topic holds.
type notifyCount struct {
	expected, got, falses, dup int
	maxCopies                  int // the most copies of one message
	detail                     []string
}

// countNotifications counts msgs against events: every incident opened on the topic (an interrupted
// event) must have been triggered, and every one closed (recovered) resolved under its trigger's
// dedup_key. A trigger of no incident, a second dedup_key for one incident, or a resolve of no trigger is
// false; dup counts every copy beyond the first of one (action, dedup_key).
func countNotifications(msgs []pdMessage, events []event.Event) notifyCount {
	var c notifyCount
	opened, closed := map[string]bool{}, map[string]bool{}
	for _, e := range events {
		switch e.Kind {
		case event.Interrupted:
			opened[incidentKey(e.DeviceID, e.LastSeen)] = true
		case event.Recovered:
			closed[incidentKey(e.DeviceID, e.LastSeen)] = true
		}
	}
	copies := map[[2]string]int{}
	incidentOf := map[string]string{} // dedup_key → incident
	keys := map[string][]string{}     // incident → its dedup_keys
	for _, m := range msgs {
		copies[[2]string{m.Action, m.DedupKey}]++
		if m.Action == "trigger" && incidentOf[m.DedupKey] == "" {
			inc := incidentKey(m.Payload.Source, m.Payload.Details.Event.LastSeen)
			incidentOf[m.DedupKey] = inc
			keys[inc] = append(keys[inc], m.DedupKey)
		}
	}
	resolved := map[string]bool{}
	for k, n := range copies {
		c.dup += n - 1
		c.maxCopies = max(c.maxCopies, n)
		if k[0] != "resolve" {
			continue
		}
		if inc := incidentOf[k[1]]; inc != "" {
			resolved[inc] = true
		} else {
			c.falses++
			c.detail = append(c.detail, "resolve of no trigger: "+k[1])
		}
	}
	c.expected = len(opened) + len(closed)
	lost := func(what, inc string) {
		if len(c.detail) < 10 {
			c.detail = append(c.detail, "lost "+what+" of "+inc)
		}
	}
	for inc := range opened {
		if len(keys[inc]) > 0 {
			c.got++
		} else {
			lost("trigger", inc)
		}
	}
	for inc := range closed {
		if resolved[inc] {
			c.got++
		} else {
			lost("resolve", inc)
		}
	}
	for inc, ks := range keys {
		switch {
		case !opened[inc]:
			c.falses++
			c.detail = append(c.detail, "trigger of no incident on the topic: "+inc)
		case len(ks) > 1:
			c.falses += len(ks) - 1
			c.detail = append(c.detail, fmt.Sprintf("%s opened %d times: %v", inc, len(ks), ks))
		}
	}
	return c
}

// publishedEvents is every event on the events topic (each id once).
func (f *fleet) publishedEvents() []event.Event {
	f.t.Helper()
	var out []event.Event
	seen := map[string]bool{}
	for _, r := range f.kafka.ReadToEnd(f.t, eventsTopic, time.Minute) {
		if e, err := event.Decode(r.Value); err == nil && !seen[e.ID] {
			seen[e.ID] = true
			out = append(out, e)
		}
	}
	return out
}

// TestChaosNotifyReceiverDown: two replicas run detection and the notifier (notify.enabled, one
// consumer group) with a PagerDuty-shaped receiver. The receiver fails for receiverDown (500, then
// hang-ups) while the silent devices are interrupted and recover, and each replica is SIGKILLed and
// started again in the middle of it; then the receiver recovers. Every incident's opening (trigger) and
// closing (resolve, under the trigger's dedup_key) must reach it: nothing lost, no keeper paged, no
// incident opened twice, and no message more than 1+notifyKills times (at least once allows a resend
// after a kill; dup counts them). The line counts the receiver's messages; the events pass the incident
// checker, and detection's own losses and false reports are figures that must be 0.
func TestChaosNotifyReceiverDown(t *testing.T) {
	f := startFleet(t)
	pd := newPDRecorder(t)
	keyFile := filepath.Join(t.TempDir(), "routing-key")
	require.NoError(t, os.WriteFile(keyFile, []byte("chaos-routing-key"), 0o600))
	// A rate far above the scenario's: a fold into a summary would be told, but not as the incident's
	// own trigger and resolve this scenario counts.
	o := daemonOptions{extra: fmt.Sprintf(`notify:
  enabled: true
  receivers:
    - {name: oncall, pagerduty: {routing_key_file: %q, url: %q}, rate: 10000/s, burst: 10000, timeout: 2s}
  routes:
    - {receiver: oncall}
`, keyFile, pd.URL+"/v2/enqueue")}
	o.replica = "replica-a"
	a := f.startDaemon(o)
	o.replica = "replica-b"
	b := f.startDaemon(o)
	n := fleetSize(t)
	s := &scenario{fleet: f, n: n, hb: b, p: f.publisher("devices"), silent: ids("silent", n)}
	logs := func() string { return "--- replica-a\n" + a.LogTail() + "\n--- replica-b\n" + b.LogTail() }
	s.keepers(10)

	// A new group starts at the topic's end: one device paged proves the notifiers read.
	warm := ids("warm", 1)
	require.NoError(t, s.p.signal(warm, nil))
	require.True(t, poll(time.Minute, func() bool { return pd.triggered(warm[0]) }), "the notifiers never paged\n%s", logs())

	// The fault: the receiver fails; the silent devices are interrupted and recover meanwhile, and each
	// replica is killed and started again while they do.
	outage := receiverOutage(t)
	pd.failing.Store(true)
	downAt := time.Now()
	time.AfterFunc(outage/2, func() { pd.hangUp.Store(true) })
	require.NoError(t, s.p.signal(s.silent, nil))
	s.awaitQuarter()
	a.Kill(t)
	a.Start(t)
	s.events.awaitReported(t, s.silent, scaled(n, 30*time.Second))
	require.NoError(t, s.p.signal(s.silent, nil))
	require.True(t, poll(scaled(n, 30*time.Second), func() bool { return s.events.count(event.Recovered, s.silent) >= n/4 }),
		"recoveries never got going\n%s", logs())
	b.Kill(t)
	b.Start(t)
	s.events.await(t, event.Recovered, s.silent, scaled(n, 30*time.Second))
	waitReady(t, a)
	waitReady(t, b)
	faultsTook := time.Since(downAt)
	// The rest of the receiver's outage, or none when a large fleet's faults took longer.
	time.Sleep(time.Until(downAt.Add(outage)))
	refused := pd.refused.Load()
	pd.failing.Store(false)
	recoveredAt := time.Now()
	downFor := recoveredAt.Sub(downAt)

	// Detection's account: each silent device interrupted and recovered, the barrier's interrupted, no
	// keeper reported, and the incident checker's verdict over every signal and event.
	expected := s.settle("notify", 30*time.Second)
	det := s.events.tally(event.Recovered, "", n, s.silent).plus(s.events.tallyInterrupted("", n, concat(warm, expected)))

	// The receiver's account, against every incident the topic holds: the silent devices' first ones,
	// opened and closed during the fault, their second ones (silent again after recovering), the warm-up's
	// and the barrier's.
	events := f.publishedEvents()
	var c notifyCount
	// The backlog drains through the retry loops after up to one backoff step, which grew to about the
	// outage's length (doubling, at most notify.RetryMax): three messages a device at a few hundred a
	// second under the race detector.
	drain := min(downFor, notify.RetryMax) + time.Minute + time.Duration(n)*15*time.Millisecond
	delivered := pollEvery(drain, 250*time.Millisecond, func() bool {
		c = countNotifications(pd.messages(), events)
		return c.got == c.expected
	})
	caughtUp := time.Since(recoveredAt)
	r := tally{scenario: "notify_receiver_down", devices: n, expected: c.expected, got: c.got, lost: c.expected - c.got,
		falses: c.falses, dup: c.dup, incidents: det.incidents, detail: c.detail, figures: []string{
			fmt.Sprintf("receiver_down=%s refused=%d kills=%d faults_took=%s caught_up_after=%s max_copies=%d messages=%d",
				downFor.Round(100*time.Millisecond), refused, notifyKills, faultsTook.Round(100*time.Millisecond), caughtUp.Round(100*time.Millisecond),
				c.maxCopies, len(pd.messages())),
			fmt.Sprintf("events_lost=%d events_false=%d", det.lost, det.falses)}}
	if !delivered {
		r.detail = append(r.detail, "not every notification arrived within the wait")
	}
	report(t, r, logs)
	require.Zero(t, det.lost+det.falses, "detection lost or falsely reported devices: %v", det.detail)
	require.Positive(t, refused, "the notifiers tried the receiver while it was down")
	require.LessOrEqual(t, c.maxCopies, 1+notifyKills, "a message sent more often than once plus a resend per kill")
}
