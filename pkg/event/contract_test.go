package event_test

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/api"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// The golden event and every kind of event the encoder writes are valid against the published schema
// (api/event.schema.json), with no field it does not declare.
func TestEventsMatchTheSchema(t *testing.T) {
	golden, err := os.ReadFile("testdata/event_v1.golden.json")
	require.NoError(t, err)
	require.NoError(t, api.ValidateEventClosed(golden))
	watchdog, err := event.NewWatchdog("replica-a", time.Date(2026, 11, 22, 10, 0, 30, 12_345_678, time.UTC)).MarshalJSON()
	require.NoError(t, err)
	require.NoError(t, api.ValidateEventClosed(watchdog))

	at := time.Date(2026, 11, 22, 10, 0, 30, 12_345_678, time.FixedZone("CET", 3600))
	deadline := at.Add(-40 * time.Second)
	lastSeen := deadline.Add(-30 * time.Second)
	for _, device := range []string{"dev-42", "a/b/c", `quote"d`, "ünïcödé-✓", "<html>&amp;", "line\u2028sep", "bad\xffutf8"} {
		degraded := event.New(event.Interrupted, device, "gateway", deadline, lastSeen, at, 0)
		degraded.Degraded = true
		for _, e := range []event.Event{
			event.New(event.Interrupted, device, "gateway", deadline, lastSeen, at, 0),
			event.New(event.Alarm, device, "gateway", deadline, lastSeen, at.Add(5*time.Minute), 1),
			event.New(event.Alarm, device, "", deadline, time.Time{}, at.Add(time.Hour), 12),
			event.New(event.Exhausted, device, "gateway", deadline, lastSeen, at.Add(time.Hour), 12),
			event.New(event.Recovered, device, "gateway", deadline, lastSeen, at.Add(2*time.Hour), 0),
			event.New(event.Recovered, device, "gateway", time.UnixMilli(0), time.Time{}, at, 0),
			degraded,
		} {
			b, err := e.MarshalJSON()
			require.NoError(t, err)
			require.NoError(t, api.ValidateEventClosed(b), "%s", b)
		}
	}
}

// Every shape of dead letter the package writes is valid against api/deadletter.schema.json: with and
// without a key, and with key and payload cut.
func TestDeadLettersMatchTheSchema(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 30, 12_345_678, time.UTC)
	huge := bytes.Repeat([]byte{0xff, 'x', 0}, event.MaxDeadLetterPayload)
	keyed := event.NewDeadLetter("malformed_json", event.SourceKafka, "device-signals", []byte(`{"ts":`), at)
	keyed.SetKey([]byte("dev-7"))
	cut := event.NewDeadLetter("oversize", event.SourceKafka, "device-signals", huge, at)
	cut.SetKey(huge[:event.MaxDeadLetterKey+1])
	for _, d := range []event.DeadLetter{
		event.NewDeadLetter("no_device_id", event.SourceMQTT, "devices//heartbeat", nil, at),
		event.NewDeadLetter("invalid_device_id", event.SourceMQTT, "devices/\x01/heartbeat", []byte{0, 1, 2}, time.UnixMilli(0)),
		keyed,
		cut,
		event.NewDeadLetter("oversize", event.SourceMQTT, "devices/x/heartbeat", huge[:event.MaxDeadLetterPayload], at),
	} {
		b, err := d.MarshalJSON()
		require.NoError(t, err)
		require.NoError(t, api.ValidateDeadLetterClosed(b), "%.300s", b)
	}
}
