package alertmanager

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/api"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// lateDaemon starts a replica whose `warned` type reports a device late a second after its last signal
// and interrupts it nine seconds later: room for a recovery in between on a loaded machine.
func (s *stack) lateDaemon() *testenv.Heartbeatd {
	s.t.Helper()
	servers := testenv.HeartbeatdConfig{Redis: s.redis.Addr, Slots: 16, MQTT: s.broker.Addr, ClientID: "am-late",
		Kafka: s.kafka.Addrs, Alertmanager: []string{s.am.URL}}
	h := testenv.StartHeartbeatd(s.t, testenv.HeartbeatdOptions{
		Config: servers.YAML(`
types:
  default: {timeout: 1h}
  warned: {timeout: 10s, warn_after: 1s, repeat_every: 1m}
log: {level: info}
`),
		Env: []string{"HEARTBEATD_CLUSTER_REPLICA_ID=late", "HEARTBEATD_OUTPUTS_ALERTMANAGER_RESEND_EVERY=1s",
			"HEARTBEATD_OUTPUTS_ALERTMANAGER_TIMEOUT=500ms"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	require.NoError(s.t, h.AwaitReady(ctx, wait), h.LogTail())
	return h
}

// eventsOf waits until device's events on the events topic include every kind of want, and returns them
// in the order published; each validates against the event schema.
func (s *stack) eventsOf(device string, want ...event.Kind) []event.Event {
	s.t.Helper()
	var got []event.Event
	s.kafka.ReadUntil(s.t, testenv.EventsTopic, wait, func(recs []testenv.Record) bool {
		got = got[:0]
		for _, r := range recs {
			require.NoError(s.t, api.ValidateEvent(r.Value))
			e, err := event.Decode(r.Value)
			require.NoError(s.t, err)
			if e.DeviceID == device {
				got = append(got, e)
			}
		}
		return len(kindsIn(got, want...)) == len(want)
	})
	require.Len(s.t, kindsIn(got, want...), len(want), "%s: want %v, got %v", device, want, got)
	return got
}

// kindsIn are the first events of got of each kind in want that it holds.
func kindsIn(got []event.Event, want ...event.Kind) map[event.Kind]event.Event {
	out := map[event.Kind]event.Event{}
	for _, e := range got {
		for _, k := range want {
			if _, seen := out[k]; e.Kind == k && !seen {
				out[k] = e
			}
		}
	}
	return out
}

// deviceAlerts are the DeviceSilent alerts Alertmanager holds unresolved for device.
func (s *stack) deviceAlerts(device string) []testenv.Alert {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := s.am.Alerts(ctx)
	require.NoError(s.t, err)
	var out []testenv.Alert
	for _, a := range list {
		if a.Labels["alertname"] == "DeviceSilent" && a.Labels["device_id"] == device {
			out = append(out, a)
		}
	}
	return out
}

// awaitDeviceAlerts polls until device's alerts satisfy cond.
func (s *stack) awaitDeviceAlerts(what, device string, cond func([]testenv.Alert) bool) []testenv.Alert {
	s.t.Helper()
	var last []testenv.Alert
	require.Eventually(s.t, func() bool {
		last = s.deviceAlerts(device)
		return cond(last)
	}, wait, 20*time.Millisecond, "%s", what)
	return last
}

func onlyWarning(a []testenv.Alert) bool { return len(a) == 1 && a[0].Labels["severity"] == "warning" }

// A warned device is reported late at last signal + warn_after, then interrupted at its timeout; in
// Alertmanager the warning (severity=warning) is replaced by the usual alert. Another device that
// signals after its warning is reported recovered, and its warning is resolved.
func TestLateThenInterruptedOrRecovered(t *testing.T) {
	s := startStack(t)
	h := s.lateDaemon()
	s.signalAs(`{"type":"warned"}`, "dev-late", "dev-back")

	// dev-back: late, then a signal before its timeout.
	got := s.eventsOf("dev-back", event.Late)
	late := got[0]
	require.Equal(t, event.Late, late.Kind, "the first event of the incident")
	require.Equal(t, time.Second, late.Deadline.Sub(late.LastSeen), "late at last signal + warn_after")
	code, body, err := h.Get("/v1/devices/dev-back")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, body)
	var view struct {
		State              string
		LastSeen, Deadline time.Time
	}
	require.NoError(t, json.Unmarshal([]byte(body), &struct {
		State    *string    `json:"state"`
		LastSeen *time.Time `json:"last_seen"`
		Deadline *time.Time `json:"deadline"`
	}{&view.State, &view.LastSeen, &view.Deadline}))
	require.Equal(t, "late", view.State, body)
	require.True(t, late.LastSeen.Equal(view.LastSeen), body)
	require.True(t, late.LastSeen.Add(10*time.Second).Equal(view.Deadline), "the deadline it is interrupted at: %s", body)

	warning := s.awaitDeviceAlerts("dev-back's warning fires", "dev-back", onlyWarning)
	require.True(t, late.Deadline.Equal(warning[0].StartsAt), "startsAt %v, warning %v", warning[0].StartsAt, late.Deadline)
	require.Contains(t, warning[0].Annotations["summary"], "late")

	s.recover("dev-back")
	got = s.eventsOf("dev-back", event.Late, event.Recovered)
	rec := kindsIn(got, event.Recovered)[event.Recovered]
	require.Equal(t, event.ID("dev-back", late.Deadline, event.Recovered, 0), rec.ID, "the late incident's recovery")
	require.NotContains(t, testenv.Kinds(got), event.Interrupted, "it signalled before its timeout")
	s.awaitDeviceAlerts("dev-back's warning resolved by its recovery", "dev-back", func(a []testenv.Alert) bool { return len(a) == 0 })

	// dev-late: late, then interrupted at its timeout; one event of each, distinct ids.
	got = s.eventsOf("dev-late", event.Late, event.Interrupted)
	byKind := kindsIn(got, event.Late, event.Interrupted)
	late, interrupted := byKind[event.Late], byKind[event.Interrupted]
	require.Equal(t, []event.Kind{event.Late, event.Interrupted}, testenv.Kinds(got), "late once, then interrupted")
	require.NotEqual(t, late.ID, interrupted.ID)
	require.Equal(t, event.ID("dev-late", late.Deadline, event.Late, 0), late.ID)
	require.Equal(t, event.ID("dev-late", interrupted.Deadline, event.Interrupted, 0), interrupted.ID)
	require.True(t, late.LastSeen.Equal(interrupted.LastSeen))
	require.Equal(t, 10*time.Second, interrupted.Deadline.Sub(interrupted.LastSeen), "interrupted at last signal + timeout")
	require.False(t, interrupted.At.Before(interrupted.Deadline))

	critical := s.awaitDeviceAlerts("dev-late's warning replaced by its alert", "dev-late", func(a []testenv.Alert) bool {
		return len(a) == 1 && a[0].Labels["severity"] == ""
	})
	require.True(t, interrupted.Deadline.Equal(critical[0].StartsAt))
	require.Contains(t, critical[0].Annotations["summary"], "silent")
}
