package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

const deadlineUTC = "2026-11-22T10:00:30Z"

func eventJSON(kind string, repeat int, silentMS int64) string {
	return fmt.Sprintf(`{"schema":"heartbeatd.event/v1","id":"gw-017/1795255230000/%s/%d","kind":%q,"device_id":"gw-017",`+
		`"device_type":"gateway","last_seen":"2026-11-22T10:00:25Z","deadline":%q,"at":"2026-11-22T10:00:30.012Z",`+
		`"silent_for_ms":%d,"repeat":%d}`, kind, repeat, kind, deadlineUTC, silentMS, repeat)
}

func TestEventLine(t *testing.T) {
	dl, err := time.Parse(time.RFC3339, deadlineUTC)
	require.NoError(t, err)
	clock := dl.Local().Format("15:04:05.000")
	tests := []struct {
		value, want string
	}{
		{eventJSON("interrupted", 0, 5012), "INTERRUPTED gw-017 (gateway) silent 5.0s deadline " + clock},
		{eventJSON("late", 0, 3008), "LATE gw-017 (gateway) silent 3.0s: interrupted at its timeout unless it signals"},
		{eventJSON("alarm", 1, 20012), "ALARM #1 gw-017 (gateway) silent 20.0s deadline " + clock},
		{eventJSON("recovered", 0, 34200), "RECOVERED gw-017 (gateway) after 34.2s"},
		{eventJSON("recovered", 0, 125300), "RECOVERED gw-017 (gateway) after 2m05.3s"},
		{eventJSON("exhausted", 12, 3*3600_000+7*60_000+12_400), "EXHAUSTED gw-017 (gateway) silent 3h07m12s after 12 alarms; quiet until it recovers"},
		{`{"schema":"heartbeatd.event/v1","id":"watchdog/dev/1795255230000","kind":"watchdog","device_id":"dev","at":"2026-11-22T10:00:30.012Z"}`, "WATCHDOG replica dev: scanner → Kafka path alive"},
		{eventJSON("surprise", 2, 1000), "SURPRISE gw-017 (gateway) silent 1.0s repeat 2"},
		{`{"schema":"heartbeatd.event/v1","id":"d/0/interrupted/0","kind":"interrupted","device_id":"d","deadline":null,"silent_for_ms":10000,"future_field":1}`, "INTERRUPTED d silent 10.0s deadline -"},
		{`{"schema":"heartbeatd.event/v1","id":"p/0/interrupted/0","kind":"interrupted","device_id":"p","deadline":null,"silent_for_ms":5,"cause":"reported","reason":"valve stuck"}`,
			"INTERRUPTED p silent 0.0s deadline -: reported (valve stuck)"},
		{`{"schema":"heartbeatd.event/v1","id":"w/0/interrupted/0","kind":"interrupted","device_id":"w","deadline":null,"silent_for_ms":3000,"cause":"offline"}`,
			"INTERRUPTED w silent 3.0s deadline -: offline"},
	}
	for _, tt := range tests {
		got, err := eventLine([]byte(tt.value))
		require.NoError(t, err, tt.value)
		require.Equal(t, tt.want, got)
	}
	_, err = eventLine([]byte("not json"))
	require.ErrorContains(t, err, "devstack: event: decode")
	_, err = eventLine([]byte(`{"schema":"someone-else/v1","id":"x","kind":"alarm","device_id":"d"}`))
	require.ErrorIs(t, err, event.ErrSchema)
}

// TestEventLineNamesParentAndOutage: dev mode prints a suppressed device with the parent that explains
// it, an outage's events with their group, device count and id, and a member's interrupted with the
// outage it belongs to: the events as the daemon encodes them.
func TestEventLineNamesParentAndOutage(t *testing.T) {
	start := time.Date(2026, 11, 22, 10, 0, 30, 0, time.UTC)
	line := func(e event.Event) string {
		t.Helper()
		value, err := json.Marshal(e)
		require.NoError(t, err)
		got, err := eventLine(value)
		require.NoError(t, err)
		return got
	}
	suppressed := event.New(event.Suppressed, "meter-7", "meter", start, start.Add(-5*time.Second), start.Add(12*time.Millisecond), 0)
	suppressed.Parent = "gw-017"
	require.Equal(t, "SUPPRESSED meter-7 (meter) silent 5.0s: its parent gw-017 is interrupted", line(suppressed))

	const id = "outage:device_type:meter/1795255230000"
	group := &event.Group{By: "device_type", Value: "meter"}
	started := event.New(event.OutageStarted, "outage:device_type:meter", "", start, time.Time{}, start, 0)
	started.OutageID, started.Group, started.Count, started.Sample = id, group, 80, []string{"meter-1", "meter-2"}
	require.Equal(t, "OUTAGE STARTED device_type=meter: 80 devices silent ("+id+")", line(started))

	ended := event.New(event.OutageEnded, "outage:device_type:meter", "", start, time.Time{}, start.Add(125300*time.Millisecond), 0)
	ended.OutageID, ended.Group, ended.Count = id, group, 3
	require.Equal(t, "OUTAGE ENDED device_type=meter after 2m05.3s: 3 devices still silent ("+id+")", line(ended))

	member := event.New(event.Interrupted, "meter-81", "meter", start, start.Add(-5*time.Second), start.Add(12*time.Millisecond), 0)
	member.OutageID = id
	require.Equal(t, "INTERRUPTED meter-81 (meter) silent 5.0s deadline "+start.Local().Format("15:04:05.000")+" in "+id, line(member))
}

func TestPrintEvents(t *testing.T) {
	s := startStack(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	core, logs := observer.New(zapcore.InfoLevel)
	done := make(chan error, 1)
	// The printer may still be connecting when the test produces: it starts at the records stamped from
	// its call on, so it catches up.
	since := time.Now()
	go func() { done <- printEvents(ctx, s.KafkaBrokers, topicEvents, zap.New(core), since) }()

	producer, err := kgo.NewClient(kgo.SeedBrokers(s.KafkaBrokers...), kgo.DefaultProduceTopic(topicEvents))
	require.NoError(t, err)
	defer producer.Close()
	produce := func(key, value string) {
		require.NoError(t, producer.ProduceSync(ctx, &kgo.Record{Key: []byte(key), Value: []byte(value)}).FirstErr())
	}
	// What the daemon publishes: pkg/event's own encoding.
	dl := time.Now().Add(-time.Second)
	interrupted, err := json.Marshal(event.New(event.Interrupted, "gw-017", "gateway", dl, dl.Add(-5*time.Second), dl.Add(12*time.Millisecond), 0))
	require.NoError(t, err)
	produce("gw-017", string(interrupted))
	produce("gw-017", "garbage")
	produce("gw-017", eventJSON("recovered", 0, 34200))

	require.Eventually(t, func() bool { return logs.Len() >= 3 }, 10*time.Second, 10*time.Millisecond)
	entries := logs.AllUntimed()
	require.Equal(t, "INTERRUPTED gw-017 (gateway) silent 5.0s deadline "+dl.Format("15:04:05.000"), entries[0].Message)
	require.Equal(t, "undecodable event", entries[1].Message)
	require.Equal(t, zapcore.WarnLevel, entries[1].Level)
	require.Equal(t, "RECOVERED gw-017 (gateway) after 34.2s", entries[2].Message)
	require.Equal(t, "events", entries[2].ContextMap()["component"])

	cancel()
	require.NoError(t, <-done)
}

func TestPrintEventsSkipsHistory(t *testing.T) {
	s := startStack(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	producer, err := kgo.NewClient(kgo.SeedBrokers(s.KafkaBrokers...), kgo.DefaultProduceTopic(topicEvents))
	require.NoError(t, err)
	defer producer.Close()
	old := &kgo.Record{Value: []byte(eventJSON("alarm", 1, 20012)), Timestamp: time.Now().Add(-time.Minute)}
	require.NoError(t, producer.ProduceSync(ctx, old).FirstErr())

	// Records written before the printer was called are history, not printed.
	core, logs := observer.New(zapcore.InfoLevel)
	done := make(chan error, 1)
	since := time.Now()
	go func() { done <- printEvents(ctx, s.KafkaBrokers, topicEvents, zap.New(core), since) }()
	produce := func(v string) {
		require.NoError(t, producer.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr())
	}
	produce(eventJSON("recovered", 0, 34200))
	require.Eventually(t, func() bool { return logs.Len() >= 1 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, "RECOVERED gw-017 (gateway) after 34.2s", logs.AllUntimed()[0].Message, "the old alarm is not printed")
	cancel()
	require.NoError(t, <-done)
}
