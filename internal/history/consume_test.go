package history_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/history"
	"github.com/heartbeatd/heartbeatd/internal/kafkaclient"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// The history is recorded from its consumer group of the events topic; a replica that could not write
// to Redis commits nothing, so the replica that reads the partitions next records the events.
func TestConsumeRecordsTheEventsTopicAndLosesNothingWhileRedisIsDown(t *testing.T) {
	k := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{testenv.EventsTopic}, Partitions: 3})
	rdb := testenv.StartRedis(t).Client(t)
	group := kafkaclient.Group{Brokers: k.Addrs, Topic: testenv.EventsTopic, ID: "history"}
	_, err := group.StartAtEnd(t.Context())
	require.NoError(t, err)

	now := time.Now().Truncate(time.Millisecond)
	interrupted := event.New(event.Interrupted, "m-1", "meter", now, now.Add(-time.Minute), now, 0)
	recovered := event.New(event.Recovered, "m-1", "meter", now, now.Add(-time.Minute), now.Add(time.Minute), 0)
	recovered.SilentForMs = 2 * time.Minute.Milliseconds()
	produce(t, k.Client(t), interrupted, recovered, event.New(event.Interrupted, "m-2", "meter", now, now, now, 0))

	// Redis unreachable: the events are read and their recording tried (the labels are looked up for it),
	// nothing recorded, nothing committed.
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	var tried atomic.Int64
	stop := consumeUntilStopped(t, history.New(history.Options{Client: down, History: config.History{GroupLabels: []string{"site"}},
		Labels: func(_ context.Context, devices []string) ([]map[string]string, error) {
			tried.Add(1)
			return make([]map[string]string, len(devices)), nil
		}}), group)
	require.Eventually(t, func() bool { return tried.Load() > 0 }, 20*time.Second, 20*time.Millisecond)
	stop()

	h := history.New(history.Options{Client: rdb})
	stop = consumeUntilStopped(t, h, group)
	defer stop()
	require.Eventually(t, func() bool {
		open, err := h.OpenByGroup(t.Context(), "device_type")
		require.NoError(t, err)
		return open["meter"] == 1
	}, 20*time.Second, 20*time.Millisecond, "m-2 open")
	require.Eventually(t, func() bool {
		in, _, err := h.Incidents(t.Context(), "m-1", 10, "")
		require.NoError(t, err)
		return len(in) == 1 && in[0].Closed != nil && in[0].Closed.Equal(now.Add(time.Minute))
	}, 20*time.Second, 20*time.Millisecond, "m-1's incident, closed when it came back")
}

func produce(t *testing.T, c *kgo.Client, events ...event.Event) {
	t.Helper()
	recs := make([]*kgo.Record, len(events))
	for i, e := range events {
		b, err := json.Marshal(e)
		require.NoError(t, err)
		recs[i] = &kgo.Record{Topic: testenv.EventsTopic, Key: []byte(e.DeviceID), Value: b}
	}
	require.NoError(t, c.ProduceSync(context.Background(), recs...).FirstErr())
}

// consumeUntilStopped runs the group's consumer on h until stop.
func consumeUntilStopped(t *testing.T, h *history.Store, g kafkaclient.Group) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Consume(ctx, g) }()
	return func() {
		cancel()
		require.NoError(t, <-done)
	}
}
