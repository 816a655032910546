package main_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// quietMinute picks a one-minute quiet interval aligned to the wall clock, with at least 15 s of it still
// ahead, waiting for the next minute when the current one is nearly over.
func quietMinute() (start, end time.Time) {
	now := time.Now().UTC()
	start = now.Truncate(time.Minute)
	if start.Add(time.Minute).Sub(now) < 15*time.Second {
		start = start.Add(time.Minute)
		time.Sleep(time.Until(start)) // a wall-clock boundary: nothing to await but the clock
	}
	return start, start.Add(time.Minute)
}

// The real binary with a one-minute quiet interval: a device whose deadline falls inside it is not
// reported then, but at the interval's end + its timeout, with its real last signal; one that signals
// again after the end is never reported.
func TestSmokeQuietMinute(t *testing.T) {
	start, end := quietMinute()
	s := &smoke{redis: testenv.StartRedis(t), broker: testenv.StartMosquitto(t),
		kafka: testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{"heartbeat.events", "heartbeat.deadletter"}}), clientID: "smoke"}
	s.hb = testenv.StartHeartbeatd(t, testenv.HeartbeatdOptions{Config: s.config(fmt.Sprintf(`
time_intervals:
  - name: blink
    time_intervals: [{times: [{start_time: %q, end_time: %q}]}]
types:
  default: {timeout: 4s, repeat_every: 0s, quiet: [blink]}
  loud: {timeout: 4s, repeat_every: 0s, quiet: []}
`, start.Format("15:04"), hhmm(end)))})
	s.device = s.broker.Connect(t, mqtt.NewClientOptions().SetClientID("smoke-device"))
	s.awaitReady(t)
	require.Less(t, time.Now(), end.Add(-8*time.Second), "heartbeatd took too long to start for this minute")

	seen := time.Now().Add(-time.Second).Truncate(time.Millisecond) // deadline seen+4s is inside the minute
	for _, dev := range []string{"sleeps", "wakes"} {
		s.publish(t, dev, fmt.Sprintf(`{"ts":%d}`, seen.UnixMilli()))
	}
	s.publish(t, "loud-1", fmt.Sprintf(`{"type":"loud","ts":%d}`, seen.UnixMilli()))
	loud := s.awaitEvent(t, "loud-1", event.Interrupted)
	require.True(t, loud.At.Before(end), "a type without intervals is reported inside the minute")

	// wakes is back once the minute ends and keeps signalling until the test is done.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(time.Until(end.Add(500 * time.Millisecond)))
		for {
			select {
			case <-stop:
				return
			default:
			}
			if tok := s.device.Publish("devices/wakes/heartbeat", 1, false, ""); !tok.WaitTimeout(5 * time.Second) {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })

	ev := s.awaitEventWithin(t, "sleeps", event.Interrupted, time.Until(end)+20*time.Second)
	require.False(t, ev.At.Before(end.Add(4*time.Second)), "reported at %v, before the interval's end + timeout", ev.At)
	require.Equal(t, end.Add(4*time.Second), ev.Deadline, "the moved deadline")
	require.Equal(t, seen.UTC(), ev.LastSeen, "the real last signal")

	code, body, err := s.hb.Get("/v1/devices/wakes")
	require.NoError(t, err)
	require.Equal(t, 200, code)
	require.Contains(t, body, `"state":"online"`)
	for _, e := range s.kafka.ReadAll(t, "heartbeat.events", 0, 2*time.Second) { // all there is
		got, err := event.Decode(e.Value)
		require.NoError(t, err)
		require.NotEqual(t, "wakes", got.DeviceID, "wakes, back after the interval, got %s", got.Kind)
	}
}

// hhmm writes end as the interval's end time: midnight is "24:00", as Alertmanager's syntax wants it.
func hhmm(end time.Time) string {
	if end.Hour() == 0 && end.Minute() == 0 {
		return "24:00"
	}
	return end.Format("15:04")
}

// awaitEventWithin is awaitEvent with its own bound.
func (s *smoke) awaitEventWithin(t *testing.T, device string, kind event.Kind, within time.Duration) event.Event {
	t.Helper()
	var found *event.Event
	s.kafka.ReadUntil(t, "heartbeat.events", within, func(recs []testenv.Record) bool {
		for _, r := range recs {
			if ev, err := event.Decode(r.Value); err == nil && ev.DeviceID == device && ev.Kind == kind {
				found = &ev
				return true
			}
		}
		return false
	})
	if found == nil {
		t.Fatalf("no %s event for %s within %v\n%s", kind, device, within, s.hb.LogTail())
	}
	return *found
}
