package eventkafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heartbeatd/heartbeatd/api"
	"github.com/heartbeatd/heartbeatd/internal/eventkafka"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// headerMap is a record's headers by name; a name twice fails the test.
func headerMap(tb testing.TB, r *kgo.Record) map[string]string {
	tb.Helper()
	m := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		_, dup := m[h.Key]
		require.False(tb, dup, "header %s twice", h.Key)
		m[h.Key] = string(h.Value)
	}
	return m
}

// Every event message carries the CloudEvents binary-mode headers, equal to its value's id, kind and
// at, and valid against the published schemas; dead letters carry none of them.
func TestPublishCloudEventsHeaders(t *testing.T) {
	c := startKafka(t)
	at := time.Date(2026, 11, 22, 10, 0, 30, 12_345_678, time.UTC)
	deadline := at.Add(-30 * time.Millisecond)
	degraded := event.New(event.Alarm, "dev-ü/2", "gateway", deadline, deadline.Add(-time.Minute), at, 4)
	degraded.Degraded = true
	events := []event.Event{
		event.New(event.Interrupted, "dev-1", "gateway", deadline, deadline.Add(-time.Minute), at, 0),
		event.New(event.Alarm, "dev-1", "gateway", deadline, deadline.Add(-time.Minute), at.Add(time.Minute), 1),
		event.New(event.Exhausted, "dev-1", "gateway", deadline, deadline.Add(-time.Minute), at.Add(time.Minute), 1),
		event.New(event.Recovered, "dev-1", "", deadline, time.Time{}, at.Truncate(time.Second), 0),
		degraded,
	}

	for _, tc := range []struct {
		name, topic, source, want string
	}{
		{"default source", "events.default", "", "/heartbeatd/hb"},
		{"key prefix escaped as a path segment", "events.escaped", eventkafka.CloudEventsSource("acme/eu:1"), "/heartbeatd/acme%2Feu:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := tc.topic
			require.NoError(t, c.CreateTopic(topic, 1, nil))
			p := newPublisher(t, eventkafka.PublisherOptions{Brokers: c.ListenAddrs(), Topic: topic, Source: tc.source})
			requireAllNil(t, p.Publish(context.Background(), events))

			recs := readAll(t, c.ListenAddrs(), topic, len(events))
			require.Len(t, recs, len(events))
			for i, r := range recs {
				e := events[i] // one partition: the order of the Publish call
				h := headerMap(t, r)
				require.Equal(t, map[string]string{
					"ce_specversion": "1.0",
					"ce_id":          e.ID,
					"ce_type":        "heartbeatd." + string(e.Kind),
					"ce_source":      tc.want,
					"ce_time":        string(event.AppendTime(nil, e.At)),
					"content-type":   "application/json",
				}, h, "event %d", i)
				require.Equal(t, e.DeviceID, string(r.Key))
				require.NoError(t, api.ValidateEventClosed(r.Value), "event %d", i)
				require.NoError(t, api.ValidateEventHeaders(h, r.Value), "event %d", i)
			}
		})
	}

	p := newPublisher(t, eventkafka.PublisherOptions{Brokers: c.ListenAddrs()})
	require.NoError(t, p.PublishDeadLetter(context.Background(),
		event.NewDeadLetter("malformed_json", event.SourceMQTT, "devices/x/heartbeat", []byte("{"), at)))
	recs := readAll(t, c.ListenAddrs(), deadLetterTopic, 1)
	require.Empty(t, recs[0].Headers, "a dead letter is no event")
	require.NoError(t, api.ValidateDeadLetterClosed(recs[0].Value))
}

// Header bytes of one Publish share one buffer: a time longer than the buffer was sized for (a year past
// 9999) grows it, and every message still carries its own values.
func TestPublishHeadersSurviveBufferGrowth(t *testing.T) {
	c := startKafka(t)
	require.NoError(t, c.CreateTopic("heartbeat.events.one", 1, nil))
	p := newPublisher(t, eventkafka.PublisherOptions{Brokers: c.ListenAddrs(), Topic: "heartbeat.events.one"})
	far := time.Date(12026, 1, 2, 3, 4, 5, 0, time.UTC)
	var events []event.Event
	for i := range 20 {
		at := far
		if i%2 == 0 {
			at = time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
		}
		events = append(events, event.New(event.Alarm, "dev-"+string(rune('a'+i)), "t", at, at, at, i+1))
	}
	requireAllNil(t, p.Publish(context.Background(), events))
	recs := readAll(t, c.ListenAddrs(), "heartbeat.events.one", len(events))
	for i, r := range recs {
		h := headerMap(t, r)
		require.Equal(t, events[i].ID, h["ce_id"])
		require.Equal(t, events[i].DeviceID, string(r.Key))
		require.Equal(t, "heartbeatd.alarm", h["ce_type"])
		require.Equal(t, string(event.AppendTime(nil, events[i].At)), h["ce_time"])
	}
}
