package devstack

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

func TestStackStartsAndStopsCleanly(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx := context.Background()
	s, err := start(ctx, Options{Logger: zaptest.NewLogger(t), AnyPorts: true})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(s.MQTTBroker, "tcp://127.0.0.1:"), s.MQTTBroker)
	require.Len(t, s.KafkaBrokers, 1)

	rdb := redis.NewClient(&redis.Options{Addr: s.RedisAddr})
	require.NoError(t, rdb.Ping(ctx).Err())

	mq := mqttClient(t, s.MQTTBroker, "probe", true)
	require.NoError(t, waitToken(ctx, mq.Publish("devices/probe/heartbeat", 1, false, ""), 5*time.Second))
	mq.Disconnect(100)

	kc, err := kgo.NewClient(kgo.SeedBrokers(s.KafkaBrokers...))
	require.NoError(t, err)
	for _, topic := range defaultTopics {
		require.NoError(t, kc.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("x")}).FirstErr(), "topic %s exists", topic)
	}
	kc.Close()
	require.NoError(t, rdb.Close())

	s.Close()
	s.Close() // twice is harmless
	for _, addr := range []string{s.RedisAddr, strings.TrimPrefix(s.MQTTBroker, "tcp://"), s.KafkaBrokers[0]} {
		_, err := net.DialTimeout("tcp", addr, time.Second)
		require.Error(t, err, "%s still listens", addr)
	}
}

func TestStackPrefersWellKnownPortsAndFallsBack(t *testing.T) {
	ctx := context.Background()
	a, err := start(ctx, Options{})
	require.NoError(t, err)
	defer a.Close()
	// A second stack on one machine cannot have the well-known ports (the first one, or whoever else holds
	// them, does) and takes free ones instead.
	b, err := start(ctx, Options{})
	require.NoError(t, err)
	defer b.Close()
	require.NotEqual(t, a.RedisAddr, b.RedisAddr)
	require.NotEqual(t, a.MQTTBroker, b.MQTTBroker)
	require.NotEqual(t, a.KafkaBrokers, b.KafkaBrokers)
	for _, addr := range []string{a.RedisAddr, b.RedisAddr} {
		require.NoError(t, redisClient(t, addr).Ping(ctx).Err())
	}
	// When the well-known ports were free the first stack has them (someone else may run one here).
	for _, c := range []struct {
		addr string
		port int
	}{{a.RedisAddr, redisPort}, {strings.TrimPrefix(a.MQTTBroker, "tcp://"), mqttPort}, {a.KafkaBrokers[0], kafkaPort}} {
		if !strings.HasSuffix(c.addr, ":"+strconv.Itoa(c.port)) {
			t.Logf("well-known port %d was taken; the stack uses %s", c.port, c.addr)
		}
	}
}

func mqttClient(t *testing.T, broker, id string, clean bool) paho.Client {
	t.Helper()
	opts := paho.NewClientOptions().AddBroker(broker).SetClientID(id).SetCleanSession(clean).SetAutoReconnect(false)
	c := paho.NewClient(opts)
	require.NoError(t, waitToken(context.Background(), c.Connect(), 5*time.Second))
	return c
}

// The broker's default per-client limits (8192 in flight) drop QoS 1 messages for a subscriber that was
// away; the daemon's persistent session must get every one of them.
func TestMQTTKeepsQoS1BacklogOfPersistentSession(t *testing.T) {
	s := startStack(t)
	ctx := context.Background()
	const backlog = 12000
	var mu sync.Mutex
	got := map[string]bool{} // topics delivered; QoS 1 may deliver one twice
	delivered := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	opts := paho.NewClientOptions().AddBroker(s.MQTTBroker).SetClientID("daemon").SetCleanSession(false).
		SetAutoReconnect(false).SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
		mu.Lock()
		got[m.Topic()] = true
		mu.Unlock()
	})
	sub := paho.NewClient(opts)
	require.NoError(t, waitToken(ctx, sub.Connect(), 5*time.Second))
	require.NoError(t, waitToken(ctx, sub.Subscribe("devices/+/heartbeat", 1, nil), 5*time.Second))
	sub.Disconnect(100)
	// The broker must have closed that connection before the session is resumed: mochi's takeover of a
	// connection it is still closing races (seen under CI load: nothing of the backlog delivered).
	require.Eventually(t, func() bool { cl, ok := s.mqtt.Clients.Get("daemon"); return ok && cl.Closed() },
		5*time.Second, 5*time.Millisecond, "the broker never saw the subscriber leave")

	pub := mqttClient(t, s.MQTTBroker, "publisher", true)
	defer pub.Disconnect(100)
	for i := range backlog {
		tok := pub.Publish(fmt.Sprintf("devices/d%d/heartbeat", i), 1, false, "")
		if i%1000 == 999 || i == backlog-1 {
			require.NoError(t, waitToken(ctx, tok, 10*time.Second))
		}
	}

	// Every message must sit in the away session before it is resumed: the publisher's last PUBACK can
	// come before the broker queued that message for the session, and a takeover racing that last
	// delivery left the resumed session with nothing (seen under load: 11999 queued, 0 delivered).
	require.Eventually(t, func() bool {
		cl, ok := s.mqtt.Clients.Get("daemon")
		return ok && cl.State.Inflight.Len() == backlog
	}, 10*time.Second, 5*time.Millisecond, "the broker never queued the whole backlog for the away session")

	// Resume as the daemon does, reconnecting when the connection drops: mochi resends the whole backlog
	// before it reads the first PUBACK, and under load that resend can fail and close the connection
	// (seen in CI: 0 of 12000). The session keeps what was not acknowledged for the next connection.
	sub = paho.NewClient(opts.SetAutoReconnect(true).SetConnectRetry(true).SetMaxReconnectInterval(time.Second))
	require.NoError(t, waitToken(ctx, sub.Connect(), 5*time.Second))
	defer sub.Disconnect(100)
	require.Eventually(t, func() bool { return delivered() == backlog }, 30*time.Second, 20*time.Millisecond,
		"got %d of %d; broker: %+v", delivered(), backlog, s.mqtt.Info.Clone())
}
