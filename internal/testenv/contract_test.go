package testenv_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/eventkafka"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// errorsTB stands in for a test to observe Errorf; everything else goes to the real test.
type errorsTB struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (e *errorsTB) Errorf(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}

func (e *errorsTB) errors() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.errs...)
}

// The contract topics are the configuration's defaults.
func TestContractTopicsAreTheDefaults(t *testing.T) {
	require.Equal(t, config.Default().Events.Kafka.Topic, testenv.EventsTopic)
	require.Equal(t, config.Default().Events.Kafka.DeadletterTopic, testenv.DeadLetterTopic)
}

// Every record read from the events and dead-letter topics is checked against the published contract:
// what heartbeatd's publisher writes passes, anything else fails the test that read it, through
// ReadAll and Consume alike; other topics are not checked.
func TestKafkaReadersCheckTheContract(t *testing.T) {
	k := testenv.StartKafka(t, testenv.KafkaOptions{
		Topics: []string{testenv.EventsTopic, testenv.DeadLetterTopic, "other"}, Partitions: 1,
	})
	p, err := eventkafka.NewPublisher(eventkafka.PublisherOptions{Brokers: k.Addrs, Topic: testenv.EventsTopic,
		DeadLetterTopic: testenv.DeadLetterTopic})
	require.NoError(t, err)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	at := time.Date(2026, 11, 22, 10, 0, 30, 12_000_000, time.UTC)
	good := event.New(event.Interrupted, "dev-1", "gateway", at, at.Add(-time.Minute), at, 0)
	for _, err := range p.Publish(ctx, []event.Event{good}) {
		require.NoError(t, err)
	}
	require.NoError(t, p.PublishDeadLetter(ctx, event.NewDeadLetter("bad_ts", event.SourceMQTT, "devices/x/heartbeat", []byte(`{"ts":"x"}`), at)))

	value, err := good.MarshalJSON()
	require.NoError(t, err)
	headers := []kgo.RecordHeader{{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte(good.ID)},
		{Key: "ce_type", Value: []byte("heartbeatd.interrupted")}, {Key: "ce_source", Value: []byte("/heartbeatd/hb")},
		{Key: "ce_time", Value: []byte("2026-11-22T10:00:30.012Z")}, {Key: "content-type", Value: []byte("application/json")}}
	undeclared := strings.Replace(string(value), `"repeat":0`, `"repeat":0,"extra":1`, 1)
	cl := k.Client(t)
	for _, r := range []*kgo.Record{
		{Topic: testenv.EventsTopic, Key: []byte("dev-1"), Value: value},                                              // no headers
		{Topic: testenv.EventsTopic, Key: []byte("dev-1"), Value: []byte(undeclared), Headers: headers},               // a field the schema lacks
		{Topic: testenv.EventsTopic, Key: []byte("dev-2"), Value: value, Headers: headers},                            // key is not the device
		{Topic: testenv.EventsTopic, Key: []byte("dev-1"), Value: value, Headers: append(headers[1:2:2], headers...)}, // ce_id twice
		{Topic: testenv.DeadLetterTopic, Value: []byte(`{"reason":"bad_ts"}`)},                                        // no source, topic, …
		{Topic: "other", Value: []byte("anything")},
	} {
		require.NoError(t, cl.ProduceSync(ctx, r).FirstErr())
	}

	for _, tc := range []struct {
		topic        string
		records, bad int
	}{{testenv.EventsTopic, 5, 4}, {testenv.DeadLetterTopic, 2, 1}, {"other", 1, 0}} {
		t.Run(tc.topic, func(t *testing.T) {
			tb := &errorsTB{TB: t}
			require.Len(t, k.ReadAll(tb, tc.topic, tc.records, 10*time.Second), tc.records)
			errs := tb.errors()
			require.Len(t, errs, tc.bad, "%q", errs)
			for i, e := range errs {
				require.Contains(t, e, "breaks the published contract", "error %d", i)
				require.Contains(t, e, "offset "+fmt.Sprint(i+1), "the first record is heartbeatd's own and valid")
			}

			tb = &errorsTB{TB: t}
			var mu sync.Mutex
			seen := 0
			k.Consume(tb, func(testenv.Record) { mu.Lock(); seen++; mu.Unlock() }, tc.topic)
			require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return seen == tc.records }, 10*time.Second, 10*time.Millisecond)
			require.Len(t, tb.errors(), tc.bad, "each record is checked before it is handed over")
		})
	}
}
