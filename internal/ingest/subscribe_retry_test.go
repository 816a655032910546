package ingest_test

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// refuseSubscribes is an ACL that refuses the first n subscription filters it is asked about (a broker
// whose ACL is fixed only after heartbeatd connected) and allows everything else.
type refuseSubscribes struct {
	auth.AllowHook
	left, asked atomic.Int32
}

func (h *refuseSubscribes) ID() string { return "refuse-subscribes" }

func (h *refuseSubscribes) OnACLCheck(_ *mochi.Client, _ string, write bool) bool {
	if write {
		return true
	}
	h.asked.Add(1)
	return h.left.Add(-1) < 0
}

// TestMQTTRetriesRefusedSubscription: a SUBACK that refuses a filter leaves the source disconnected (a
// blind window for detection) and is retried on the same connection until the broker grants every
// filter; then signals flow. mosquitto cannot change its ACL under a connected client, so the broker
// here is mochi-mqtt with an ACL hook.
func TestMQTTRetriesRefusedSubscription(t *testing.T) {
	acl := &refuseSubscribes{}
	acl.left.Store(int32(len(mqttSubscriptions) + 1)) // the whole first attempt and part of the second
	srv := mochi.New(&mochi.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, srv.AddHook(acl, nil))
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))
	require.NoError(t, srv.AddListener(listeners.NewTCP(listeners.Config{ID: "tcp", Address: addr})))
	require.NoError(t, srv.Serve())
	t.Cleanup(func() { _ = srv.Close() })

	broker := "tcp://" + addr
	p := startPipeline(t, policyStore(t, testenv.StartRedis(t).Client(t)), ingest.ChainOptions{})
	p.run(t, newMQTTSource(t, broker, "heartbeatd", nil))
	require.GreaterOrEqual(t, int(acl.asked.Load()), 3*len(mqttSubscriptions), "connected only after the third attempt")

	pub := mqttClient(t, broker, "publisher", nil)
	tok := pub.Publish(mqttTopic("after-refusal"), 1, false, "")
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())
	p.waitApplied(t, "after-refusal")
}

// TestKafkaWaitsForMissingTopic: a signal topic that does not exist yet keeps the source disconnected
// (a blind window for detection) while it probes again with backoff; once the topic is created, the
// source joins its group and signals flow.
func TestKafkaWaitsForMissingTopic(t *testing.T) {
	k := testenv.StartKafka(t, testenv.KafkaOptions{}) // no topics, none created on demand
	core, logs := observer.New(zap.WarnLevel)
	src, err := ingest.NewKafkaSource(ingest.KafkaOptions{
		Brokers: k.Addrs, Topics: []string{signalTopic}, GroupID: "heartbeatd",
		HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 6 * time.Second, RebalanceTimeout: 3 * time.Second,
		ProbeInterval: 100 * time.Millisecond, CommitInterval: 20 * time.Millisecond, DrainTimeout: time.Second, Logger: zap.New(core),
	})
	require.NoError(t, err)
	p := startPipeline(t, policyStore(t, testenv.StartRedis(t).Client(t)), ingest.ChainOptions{})
	p.start(t, src)
	require.Eventually(t, func() bool { return logs.FilterMessageSnippet("retrying").Len() > 0 }, 20*time.Second, 10*time.Millisecond,
		"the first probe finds the topic missing")
	require.False(t, src.Health().Connected)

	req := kmsg.NewPtrCreateTopicsRequest()
	topic := kmsg.NewCreateTopicsRequestTopic()
	topic.Topic, topic.NumPartitions, topic.ReplicationFactor = signalTopic, 1, 1
	req.Topics = append(req.Topics, topic)
	_, err = req.RequestWith(context.Background(), k.Client(t))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return src.Health().Connected }, 30*time.Second, 10*time.Millisecond, "connected once the topic exists")

	w := kafkaWriter(k.Addrs, nil, nil)
	t.Cleanup(func() { _ = w.Close() })
	require.NoError(t, w.WriteMessages(context.Background(), kafka.Message{Key: []byte("after-topic")}))
	p.waitApplied(t, "after-topic")
}
