package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/silence"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// actsDaemon is one heartbeatd run in-process on real servers, for the operator acts' tests.
type actsDaemon struct {
	t      *testing.T
	base   string
	kafka  *testenv.Kafka
	device mqtt.Client
	token  string // presented by call
}

// startActsDaemon runs the daemon with a one-second timeout and repeats a minute apart: an event that
// comes within a few seconds of an act is the act's doing, never a repeat.
func startActsDaemon(t *testing.T) *actsDaemon {
	t.Helper()
	return startActsDaemonWith(t, "", "")
}

// startActsDaemonWith is startActsDaemon with more keys of the http block (YAML flow, after listen) and
// the token its calls present.
func startActsDaemonWith(t *testing.T, httpKeys, token string) *actsDaemon {
	t.Helper()
	return startActsDaemonSections(t, httpKeys, token, "")
}

// startActsDaemonSections is startActsDaemonWith with more top-level sections of the config (YAML).
func startActsDaemonSections(t *testing.T, httpKeys, token, sections string) *actsDaemon {
	t.Helper()
	rdb := testenv.StartRedis(t)
	broker := testenv.StartMosquitto(t)
	kafka := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{testenv.EventsTopic, testenv.DeadLetterTopic}})
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	path := filepath.Join(t.TempDir(), "heartbeatd.yaml")
	servers := testenv.HeartbeatdConfig{Redis: rdb.Addr, Slots: 4, MQTT: broker.Addr, ClientID: "acts", Kafka: kafka.Addrs}
	require.NoError(t, os.WriteFile(path, []byte(servers.YAML(fmt.Sprintf(`
types:
  default: {timeout: 1s, repeat_every: 1m}
  meter: {timeout: 1s, repeat_every: 1m}
detection: {grace_after_outage: 100ms}
http: {listen: %q%s}
shutdown_timeout: %s
%s
`, httpAddr, httpKeys, shutdownTimeout, sections))), 0o600))

	startDaemon(t, path)
	d := &actsDaemon{t: t, base: "http://" + httpAddr, kafka: kafka, token: token,
		device: broker.Connect(t, mqtt.NewClientOptions().SetClientID("acts-devices"))}
	awaitReadyz(t, d.base)
	return d
}

// awaitReadyz waits until the daemon at base answers /readyz with 200.
func awaitReadyz(t *testing.T, base string) {
	t.Helper()
	require.Eventually(t, func() bool {
		code, _ := callJSON(t, base, "GET", "/readyz", "", "")
		return code == http.StatusOK
	}, 20*time.Second, 20*time.Millisecond)
}

// signal sends one heartbeat of device (typ "" = untyped).
func (d *actsDaemon) signal(device, typ string) {
	d.t.Helper()
	payload := ""
	if typ != "" {
		payload = fmt.Sprintf(`{"type":%q}`, typ)
	}
	tok := d.device.Publish("devices/"+device+"/heartbeat", 1, false, payload)
	require.True(d.t, tok.WaitTimeout(10*time.Second))
	require.NoError(d.t, tok.Error())
}

// call sends a request and requires the status.
func (d *actsDaemon) call(method, path, body string, want int) map[string]any {
	d.t.Helper()
	code, out := callJSON(d.t, d.base, method, path, d.token, body)
	require.Equal(d.t, want, code, "%s %s: %v", method, path, out)
	return out
}

// await reads the events topic (each validated against the schema) until every predicate has matched an
// event, and returns all events read.
func (d *actsDaemon) await(what string, preds ...func(event.Event) bool) []event.Event {
	d.t.Helper()
	var all []event.Event
	d.kafka.ReadUntil(d.t, testenv.EventsTopic, 30*time.Second, func(recs []testenv.Record) bool {
		all = all[:0]
		for _, r := range recs {
			e, err := event.Decode(r.Value)
			require.NoError(d.t, err)
			all = append(all, e)
		}
		for _, p := range preds {
			if !anyEvent(all, p) {
				return false
			}
		}
		return true
	})
	for _, p := range preds {
		require.True(d.t, anyEvent(all, p), "%s: not among the events %v", what, all)
	}
	return all
}

func anyEvent(all []event.Event, p func(event.Event) bool) bool {
	for _, e := range all {
		if p(e) {
			return true
		}
	}
	return false
}

func is(kind event.Kind, device string) func(event.Event) bool {
	return func(e event.Event) bool { return e.Kind == kind && e.DeviceID == device }
}

// only returns the one event of kind for device among all, failing when there are none or several.
func only(t *testing.T, all []event.Event, kind event.Kind, device string) event.Event {
	t.Helper()
	var got []event.Event
	for _, e := range all {
		if is(kind, device)(e) {
			got = append(got, e)
		}
	}
	require.Len(t, got, 1, "%s events of %s: %v", kind, device, got)
	return got[0]
}

// silenceEvents returns the one silenced and the one unsilenced event of device, checking that both carry
// the ids derived from silence silenceID.
func silenceEvents(t *testing.T, all []event.Event, silenceID, device string) (on, off event.Event) {
	t.Helper()
	on, off = only(t, all, event.Silenced, device), only(t, all, event.Unsilenced, device)
	require.Equal(t, silence.EventID(silenceID, event.Silenced), on.ID)
	require.Equal(t, silence.EventID(silenceID, event.Unsilenced), off.ID)
	return on, off
}

// Every operator act publishes exactly one event, with the act's by and note, through the daemon's
// sink (the test reader validates each against api/event.schema.json); a silence deleted early re-arms
// the device it deferred, and one that ends at its time is announced too.
func TestOperatorActsAreEvents(t *testing.T) {
	d := startActsDaemon(t)
	for _, dev := range []string{"ack-1", "del-1", "sil-1"} {
		d.signal(dev, "")
	}
	d.signal("meter-1", "meter")
	// Known before its silence, so the silenced event names its type.
	require.Eventually(t, func() bool {
		code, _ := callJSON(t, d.base, "GET", "/v1/devices/sil-1", "", "")
		return code == http.StatusOK
	}, 20*time.Second, 10*time.Millisecond)
	silenced := d.call("POST", "/v1/silences", `{"device_id":"sil-1","for":"1h","by":"carol","comment":"battery swap"}`,
		http.StatusCreated)
	typeSilence := d.call("POST", "/v1/silences", `{"device_type":"meter","for":"3s","by":"erin","note":"meter firmware"}`,
		http.StatusCreated)
	d.await("the unsilenced devices interrupt", is(event.Interrupted, "ack-1"), is(event.Interrupted, "del-1"))

	// The silenced device's incident waits for the silence's end, an hour away.
	require.Eventually(t, func() bool {
		dev := d.call("GET", "/v1/devices/sil-1", "", http.StatusOK)
		return dev["state"] == "interrupted" && dev["next_alarm"] == silenced["ends"]
	}, 20*time.Second, 20*time.Millisecond, "sil-1 deferred to its silence's end")

	d.call("POST", "/v1/devices/ack-1/ack", `{"by":"alice","note":"site visit booked"}`, http.StatusOK)
	d.call("DELETE", "/v1/devices/del-1?by=bob&note=decommissioned", "", http.StatusNoContent)
	d.call("DELETE", "/v1/silences/"+silenced["id"].(string)+"?by=dave&note=done+early", "", http.StatusNoContent)

	// Within a few seconds, not in an hour: the deleted silence re-armed sil-1.
	d.await("sil-1 alarms once its silence is deleted", is(event.Interrupted, "sil-1"))
	// The type silence ends at its time; meter-1, deferred by it, alarms then.
	d.await("the type silence ends", is(event.Unsilenced, "meter"), is(event.Interrupted, "meter-1"))
	// A barrier: a device interrupting after everything above gives any duplicate time to show. The
	// read also waits for every event checked below: a fresh read may deliver the barrier's partition
	// before another one's.
	d.signal("barrier", "")
	all := d.await("the barrier", is(event.Interrupted, "barrier"),
		is(event.Interrupted, "ack-1"), is(event.Acked, "ack-1"), is(event.Interrupted, "del-1"), is(event.Deleted, "del-1"),
		is(event.Silenced, "sil-1"), is(event.Unsilenced, "sil-1"), is(event.Interrupted, "sil-1"),
		is(event.Silenced, "meter"), is(event.Unsilenced, "meter"), is(event.Interrupted, "meter-1"))

	interrupted := only(t, all, event.Interrupted, "ack-1")
	acked := only(t, all, event.Acked, "ack-1")
	require.Equal(t, event.ID("ack-1", interrupted.Deadline, event.Acked, 0), acked.ID)
	require.Equal(t, interrupted.Deadline, acked.Deadline)
	require.Equal(t, "default", acked.DeviceType)
	require.Equal(t, event.Detail{By: "alice", Note: "site visit booked"}, acked.Detail)

	deleted := only(t, all, event.Deleted, "del-1")
	require.Equal(t, event.ID("del-1", deleted.At, event.Deleted, 0), deleted.ID)
	require.Equal(t, only(t, all, event.Interrupted, "del-1").Deadline, deleted.Deadline)
	require.Equal(t, event.Detail{By: "bob", Note: "decommissioned"}, deleted.Detail)

	on, off := silenceEvents(t, all, silenced["id"].(string), "sil-1")
	require.Equal(t, "default", on.DeviceType)
	require.Equal(t, event.Detail{By: "carol", Note: "battery swap"}, on.Detail)
	require.Equal(t, event.Detail{By: "dave", Note: "done early"}, off.Detail)
	reArmed := only(t, all, event.Interrupted, "sil-1")
	require.False(t, reArmed.At.Before(off.At), "sil-1 stayed quiet while its silence lasted")

	typeOn, typeOff := silenceEvents(t, all, typeSilence["id"].(string), "meter")
	require.Equal(t, "meter", typeOn.DeviceType)
	require.Equal(t, event.Detail{By: "erin", Note: "meter firmware"}, typeOn.Detail)
	require.Equal(t, event.Detail{}, typeOff.Detail, "ended at its time: by no one")
	only(t, all, event.Interrupted, "meter-1")

	// The silence store lists what the API stored: by, and note as the comment.
	var list struct{ Silences []silence.Silence }
	raw, err := json.Marshal(d.call("GET", "/v1/silences", "", http.StatusOK))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &list))
	for _, s := range list.Silences {
		require.NotEqual(t, silenced["id"], s.ID, "the deleted silence is gone")
	}
}
