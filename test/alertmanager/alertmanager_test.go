// Package alertmanager checks outputs.alertmanager end to end: the real heartbeatd binary on real
// redis-server, mosquitto and prometheus-alertmanager processes and an in-process kfake cluster, with
// the alerts read back from Alertmanager's own API.
package alertmanager

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// TestMain removes the heartbeatd binary the tests built once they all ended.
func TestMain(m *testing.M) { testenv.MainWithBinary(m) }

// wait bounds every await: generous, for a loaded two-core machine; conditions end it far sooner.
const wait = 30 * time.Second

// stack is one test's servers.
type stack struct {
	t      *testing.T
	redis  *testenv.Redis
	broker *testenv.Mosquitto
	kafka  *testenv.Kafka
	am     *testenv.Alertmanager
	device mqtt.Client
}

func startStack(t *testing.T) *stack {
	t.Helper()
	s := &stack{t: t}
	s.redis = testenv.StartRedis(t)
	s.broker = testenv.StartMosquitto(t)
	s.kafka = testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{testenv.EventsTopic, testenv.DeadLetterTopic}})
	s.am = testenv.StartAlertmanager(t)
	s.device = s.broker.Connect(t, mqtt.NewClientOptions().SetClientID("am-devices"))
	return s
}

// daemon starts a heartbeatd replica posting to the stack's Alertmanager every resend: devices time
// out after a second and repeat a minute later, so every alert change in a test is the output's doing.
func (s *stack) daemon(replica string, resend time.Duration) *testenv.Heartbeatd {
	s.t.Helper()
	return s.daemonTo(replica, resend, s.am.URL, "")
}

// daemonTo is daemon posting to url, with further config sections.
func (s *stack) daemonTo(replica string, resend time.Duration, url, sections string) *testenv.Heartbeatd {
	s.t.Helper()
	servers := testenv.HeartbeatdConfig{Redis: s.redis.Addr, Slots: 16, MQTT: s.broker.Addr, ClientID: "am-" + replica,
		Kafka: s.kafka.Addrs, Alertmanager: []string{url}}
	h := testenv.StartHeartbeatd(s.t, testenv.HeartbeatdOptions{
		Config: servers.YAML(`
types:
  default: {timeout: 1s, repeat_every: 1m}
  slow: {timeout: 1h}
  cell: {timeout: 1s, repeat_every: 1m}
detection: {grace_after_outage: 100ms}
log: {level: info}
` + sections),
		Env: []string{"HEARTBEATD_CLUSTER_REPLICA_ID=" + replica,
			"HEARTBEATD_OUTPUTS_ALERTMANAGER_RESEND_EVERY=" + resend.String(),
			"HEARTBEATD_OUTPUTS_ALERTMANAGER_TIMEOUT=500ms",
			"HEARTBEATD_OUTPUTS_ALERTMANAGER_LABELS=team=iot"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	require.NoError(s.t, h.AwaitReady(ctx, wait), h.LogTail())
	return h
}

func (s *stack) signal(devices ...string) { s.signalAs("", devices...) }

// recover signals devices as the slow type (an hour's timeout): they recover and stay online for the
// rest of the test.
func (s *stack) recover(devices ...string) { s.signalAs(`{"type":"slow"}`, devices...) }

func (s *stack) signalAs(payload string, devices ...string) {
	s.t.Helper()
	for _, d := range devices {
		tok := s.device.Publish("devices/"+d+"/heartbeat", 1, false, payload)
		require.True(s.t, tok.WaitTimeout(10*time.Second))
		require.NoError(s.t, tok.Error())
	}
}

// events waits until each device has an event of kind on the events topic and returns the last of each.
func (s *stack) events(kind event.Kind, devices ...string) map[string]event.Event {
	s.t.Helper()
	got := map[string]event.Event{}
	s.kafka.ReadUntil(s.t, testenv.EventsTopic, wait, func(recs []testenv.Record) bool {
		for _, r := range recs {
			e, err := event.Decode(r.Value)
			require.NoError(s.t, err)
			if e.Kind == kind {
				got[e.DeviceID] = e
			}
		}
		for _, d := range devices {
			if _, ok := got[d]; !ok {
				return false
			}
		}
		return true
	})
	for _, d := range devices {
		require.Contains(s.t, got, d, "no %s event", kind)
	}
	return got
}

// alerts are the DeviceSilent alerts Alertmanager holds unresolved, by device; a second alert of a device
// (another label set) fails the test.
func (s *stack) alerts() map[string]testenv.Alert {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := s.am.Alerts(ctx)
	require.NoError(s.t, err)
	out := map[string]testenv.Alert{}
	for _, a := range list {
		if a.Labels["alertname"] != "DeviceSilent" {
			continue
		}
		d := a.Labels["device_id"]
		if prev, dup := out[d]; dup {
			s.t.Fatalf("two alerts for %s: %v and %v", d, prev.Labels, a.Labels)
		}
		out[d] = a
	}
	return out
}

// awaitAlerts polls Alertmanager until cond holds of its alerts, on the test's goroutine, so cond may
// assert.
func (s *stack) awaitAlerts(what string, cond func(map[string]testenv.Alert) bool) map[string]testenv.Alert {
	s.t.Helper()
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		last := s.alerts()
		if cond(last) {
			return last
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: not within %v; Alertmanager holds the alerts of %v", what, wait, keys(last))
		}
		<-tick.C
	}
}

func keys(m map[string]testenv.Alert) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func has(devices ...string) func(map[string]testenv.Alert) bool {
	return func(a map[string]testenv.Alert) bool {
		for _, d := range devices {
			if _, ok := a[d]; !ok {
				return false
			}
		}
		return true
	}
}

func lacks(devices ...string) func(map[string]testenv.Alert) bool {
	return func(a map[string]testenv.Alert) bool {
		for _, d := range devices {
			if _, ok := a[d]; ok {
				return false
			}
		}
		return true
	}
}

// An interrupted device fires with the labels of docs/events.md and startsAt at its deadline, stays active
// past the endsAt of any single post (re-posted), and is resolved by its recovery and by an ack.
func TestAlertsFireRefreshAndResolve(t *testing.T) {
	s := startStack(t)
	h := s.daemon("r1", time.Second)
	s.signal("dev-fire", "dev-rec", "dev-ack")
	interrupted := s.events(event.Interrupted, "dev-fire", "dev-rec", "dev-ack")

	first := s.awaitAlerts("the three fire", has("dev-fire", "dev-rec", "dev-ack"))
	for d, a := range first {
		require.Equal(t, map[string]string{"alertname": "DeviceSilent", "device_id": d, "device_type": "default", "team": "iot"}, a.Labels)
		require.True(t, interrupted[d].Deadline.Equal(a.StartsAt), "%s: startsAt %v, deadline %v", d, a.StartsAt, interrupted[d].Deadline)
		require.Contains(t, a.Annotations["summary"], d)
	}

	// Refreshed: still active once the endsAt of the first post has passed.
	ends := first["dev-fire"].EndsAt
	s.awaitAlerts("dev-fire active past its first endsAt", func(a map[string]testenv.Alert) bool {
		fire, ok := a["dev-fire"]
		return ok && time.Now().After(ends.Add(time.Second)) && fire.EndsAt.After(ends) && fire.StartsAt.Equal(first["dev-fire"].StartsAt)
	})

	s.recover("dev-rec")
	s.events(event.Recovered, "dev-rec")
	s.awaitAlerts("dev-rec resolved by its recovery", lacks("dev-rec"))

	resp, err := http.Post(h.HTTP+"/v1/devices/dev-ack/ack", "application/json", strings.NewReader(`{"by":"alice"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	s.awaitAlerts("dev-ack resolved by the ack", lacks("dev-ack"))
	require.Contains(t, s.alerts(), "dev-fire", "still silent, still firing")
}

// While Alertmanager cannot be reached, a recovery is kept and resolves its alert on return; while it
// is down (its alerts lost), a new interruption is posted on its return with the incidents it lost,
// without waiting for the next re-sync (resend_every is two minutes here, alerts live eight).
func TestAlertmanagerOutage(t *testing.T) {
	s := startStack(t)
	p := startProxy(t, strings.TrimPrefix(s.am.URL, "http://"))
	h := s.daemonTo("r1", 2*time.Minute, p.URL(), "")
	s.signal("dev-a", "dev-c")
	s.events(event.Interrupted, "dev-a", "dev-c")
	s.awaitAlerts("both fire", has("dev-a", "dev-c"))

	p.cut()
	s.recover("dev-a")
	s.events(event.Recovered, "dev-a")
	require.Eventually(t, func() bool {
		_, metrics, err := h.Get("/metrics")
		return err == nil && !strings.Contains(metrics, `heartbeatd_alertmanager_posts_total{result="failed"} 0`)
	}, wait, 20*time.Millisecond, "the resolve's post failed")
	require.Contains(t, s.alerts(), "dev-a", "not resolved while unreachable")
	p.restore()
	s.awaitAlerts("dev-a resolved on Alertmanager's return", lacks("dev-a"))

	s.am.Stop(t) // its alerts are lost with it
	s.signal("dev-b")
	s.events(event.Interrupted, "dev-b")
	s.am.Start(t)
	a := s.awaitAlerts("the open incidents posted on return", has("dev-b", "dev-c"))
	require.NotContains(t, a, "dev-a")
}

// Two replicas share the slots, so each device is posted by one of them: one alert per device, whose
// startsAt never moves, over several resend rounds.
func TestTwoReplicasPostOneAlertPerDevice(t *testing.T) {
	s := startStack(t)
	r1, r2 := s.daemon("r1", time.Second), s.daemon("r2", time.Second)
	var devices []string
	for i := range 12 {
		devices = append(devices, fmt.Sprintf("dev-%02d", i))
	}
	s.signal(devices...)
	interrupted := s.events(event.Interrupted, devices...)
	first := s.awaitAlerts("every device fires", has(devices...))

	var until time.Time
	for _, a := range first {
		if a.EndsAt.After(until) {
			until = a.EndsAt
		}
	}
	// Past the endsAt of every first post, each sample holds the same alerts, re-posted.
	s.awaitAlerts("several rounds", func(a map[string]testenv.Alert) bool {
		require.Len(t, a, len(devices), "no device lost, none doubled: %v", keys(a))
		for d, al := range a {
			require.Equal(t, first[d].Fingerprint, al.Fingerprint, "%s: the same alert", d)
			require.True(t, interrupted[d].Deadline.Equal(al.StartsAt), "%s: startsAt %v moved from %v", d, al.StartsAt, interrupted[d].Deadline)
		}
		return time.Now().After(until.Add(time.Second))
	})
	for _, h := range []*testenv.Heartbeatd{r1, r2} {
		_, metrics, err := h.Get("/metrics")
		require.NoError(t, err)
		require.NotContains(t, metrics, `heartbeatd_alertmanager_posts_total{result="ok"} 0`, "each replica posts its share")
	}
}

// A suppressed child and the members of a correlated outage carry inhibited_by, the outage is one
// DeviceOutage alert, and a restarted heartbeatd (nothing remembered) re-posts every alert with the
// labels it fired with: no second alert for any device.
func TestInhibitedLabelsSurviveARestart(t *testing.T) {
	s := startStack(t)
	h := s.daemonTo("r1", time.Second, s.am.URL, "correlation: {by: [device_type], min_devices: 3, window: 10s}\n")
	s.signalAs(`{"type":"cell"}`, "cell-0", "cell-1")
	s.signal("gw-1")
	s.signalAs(`{"parent":"gw-1"}`, "child-1")
	s.events(event.Interrupted, "cell-0", "cell-1") // below the threshold: paged as they are
	s.signalAs(`{"type":"cell"}`, "cell-2")
	outage := s.outageStarted()
	s.signalAs(`{"type":"cell"}`, "cell-3", "cell-4") // interrupted while the outage is open: its members
	members := s.events(event.Interrupted, "cell-2", "cell-3", "cell-4")
	for _, d := range []string{"cell-2", "cell-3", "cell-4"} {
		require.Equal(t, outage, members[d].OutageID, "%s carries the outage (cell-2 made it)", d)
	}
	s.events(event.Suppressed, "child-1")

	before := s.awaitAlerts("every device fires", has("cell-0", "cell-1", "cell-2", "cell-3", "cell-4", "gw-1", "child-1"))
	for _, d := range []string{"cell-2", "cell-3", "cell-4"} {
		require.Equal(t, outage, before[d].Labels["inhibited_by"], d)
	}
	require.NotContains(t, before["cell-0"].Labels, "inhibited_by", "interrupted before the outage: its own alert")
	require.Equal(t, "gw-1", before["child-1"].Labels["inhibited_by"])
	require.Equal(t, "gw-1", before["child-1"].Labels["parent"])
	require.NotContains(t, before["gw-1"].Labels, "inhibited_by")
	s.awaitOutageAlert(outage)

	h.Stop(t)
	restarted := time.Now()
	h.Start(t)
	after := s.awaitAlerts("every alert re-posted by the restarted replica", func(a map[string]testenv.Alert) bool {
		for d := range before {
			if al, ok := a[d]; !ok || !al.UpdatedAt.After(restarted) {
				return false
			}
		}
		return true
	})
	for d, al := range after {
		require.Equal(t, before[d].Labels, al.Labels, "%s: the same labels", d)
		require.Equal(t, before[d].Fingerprint, al.Fingerprint, d)
	}
	s.awaitOutageAlert(outage)
}

// outageStarted waits for the outage_started event and returns its outage id.
func (s *stack) outageStarted() string {
	s.t.Helper()
	var id string
	s.kafka.ReadUntil(s.t, testenv.EventsTopic, wait, func(recs []testenv.Record) bool {
		for _, r := range recs {
			e, err := event.Decode(r.Value)
			require.NoError(s.t, err)
			if e.Kind == event.OutageStarted {
				id = e.OutageID
			}
		}
		return id != ""
	})
	require.NotEmpty(s.t, id, "no outage_started")
	return id
}

// awaitOutageAlert waits until Alertmanager holds the DeviceOutage alert of the outage.
func (s *stack) awaitOutageAlert(id string) {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		list, err := s.am.Alerts(ctx)
		if err != nil {
			return false
		}
		for _, a := range list {
			if a.Labels["alertname"] == "DeviceOutage" && a.Labels["outage_id"] == id {
				return true
			}
		}
		return false
	}, wait, 20*time.Millisecond, "the DeviceOutage alert of %s", id)
}
