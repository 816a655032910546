package ingest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// presenceSubscriptions are the heartbeat topic plus a last will's topic read twice: "offline" moves
// the deadline earlier, "online" is a signal; any other payload there is ignored.
var presenceSubscriptions = []ingest.Subscription{
	{Topic: "devices/{device_id}/heartbeat"},
	{Topic: "devices/{device_id}/status", Presence: config.PresenceOffline, Payload: "offline"},
	{Topic: "devices/{device_id}/status", Presence: config.PresenceOnline, Payload: "online"},
}

const offlineGrace = 2 * time.Second

// presencePipeline is a chain on a fresh standalone Redis with an MQTT source on the presence topics.
func presencePipeline(t *testing.T) (*pipeline, *testenv.Mosquitto, mqtt.Client, *redis.Client) {
	t.Helper()
	rdb := testenv.StartRedis(t).Client(t)
	store := policyStore(t, rdb)
	broker := testenv.StartMosquitto(t)
	p := startPipeline(t, store, ingest.ChainOptions{OfflineGrace: offlineGrace})
	src, err := ingest.NewMQTTSource(ingest.MQTTOptions{Brokers: []string{broker.Addr}, ClientID: "heartbeatd-presence", QoS: 1,
		Subscriptions: presenceSubscriptions, MaxReconnectInterval: 500 * time.Millisecond, DrainTimeout: time.Second})
	require.NoError(t, err)
	p.run(t, src)
	return p, broker, mqttClient(t, broker.Addr, "publisher", nil), rdb
}

func publish(t *testing.T, c mqtt.Client, topic, payload string) {
	t.Helper()
	tok := c.Publish(topic, 1, false, payload)
	require.True(t, tok.WaitTimeout(30*time.Second), "publish timed out")
	require.NoError(t, tok.Error())
}

// awaitMarked waits until heartbeatd_signals_marked_total{cause, result} reaches n.
func (p *pipeline) awaitMarked(t *testing.T, cause, result string, n float64) {
	t.Helper()
	labels := map[string]string{"cause": cause, "result": result}
	require.Eventually(t, func() bool { return counter(t, p.reg, "heartbeatd_signals_marked_total", labels) >= n },
		30*time.Second, 5*time.Millisecond, "%s %s reaches %v", cause, result, n)
}

// awaitClaim claims every slot until device is claimed (its deadline passed) and returns its claim;
// it fails if another device is claimed meanwhile.
func (p *pipeline) awaitClaim(t *testing.T, device string) deadline.Claim {
	t.Helper()
	var got deadline.Claim
	require.Eventually(t, func() bool {
		res, err := p.store.Claim(context.Background(), testenv.AllSlots(p.store.Slots()),
			deadline.ClaimOptions{Now: time.Now(), Lease: time.Minute, Batch: 100})
		require.NoError(t, err)
		for _, c := range res.Claims {
			require.Equal(t, device, c.Device, "only %s falls silent", device)
			got = c
		}
		return got.Device != ""
	}, 30*time.Second, 20*time.Millisecond, "%s claimed", device)
	return got
}

// A real last will: a device's client killed with SIGKILL makes mosquitto publish "offline", which
// moves the device's deadline to its receipt + offline_grace with the cause offline; a device that says
// "online" after its will keeps its own deadline, and other words on the topic are ignored.
func TestLastWillMovesDeadlineEarlier(t *testing.T) {
	p, broker, pub, _ := presencePipeline(t)
	publish(t, pub, "devices/d1/heartbeat", `{"type":"sensor"}`) // 10 min timeout
	publish(t, pub, "devices/d2/heartbeat", `{"type":"sensor"}`)
	p.waitApplied(t, "d1", "d2")
	seen := p.device(t, "d1").Deadline.Add(-10 * time.Minute)

	back := broker.ConnectWithWill(t, "d2-conn", "devices/d2/status", "offline")
	gone := broker.ConnectWithWill(t, "d1-conn", "devices/d1/status", "offline")
	back.Kill()
	p.awaitMarked(t, deadline.CauseOffline, "moved", 1)
	publish(t, pub, "devices/d2/status", "online") // it reconnected within the grace
	publish(t, pub, "devices/d3/status", "rebooting")
	killed := time.Now()
	gone.Kill()
	p.awaitMarked(t, deadline.CauseOffline, "moved", 2)

	d1 := p.device(t, "d1").Deadline
	require.WithinRange(t, d1, killed, time.Now().Add(offlineGrace), "d1's deadline is its will's receipt + grace")
	require.Eventually(t, func() bool { return p.device(t, "d2").Deadline.After(time.Now().Add(9 * time.Minute)) },
		30*time.Second, 5*time.Millisecond, "d2's online message is a signal")
	require.Eventually(t, func() bool {
		return counter(t, p.reg, "heartbeatd_signals_total", map[string]string{"source": "mqtt", "result": "ignored"}) == 1
	}, 30*time.Second, 5*time.Millisecond, "the other payload is ignored")

	c := p.awaitClaim(t, "d1")
	require.Equal(t, d1.UnixMilli(), c.State.Deadline)
	require.NotNil(t, c.Cause)
	require.Equal(t, deadline.CauseOffline, c.Cause.Kind)
	require.Equal(t, seen.UnixMilli(), c.Cause.LastSeen.UnixMilli(), "last seen is its last heartbeat")
}

// Reported failures over MQTT and Kafka: one is due at once with its reason; one older than the
// device's last signal changes nothing; a reason over 256 bytes is bad input.
func TestReportedFailureOverTransports(t *testing.T) {
	for _, name := range []string{ingest.SourceMQTT, ingest.SourceKafka} {
		t.Run(name, func(t *testing.T) {
			var tr *transport
			if name == ingest.SourceMQTT {
				tr = newMQTTTransport(t)
			} else {
				tr, _ = newKafkaTransport(t, 2)
			}
			store := policyStore(t, testenv.StartRedis(t).Client(t))
			p := startPipeline(t, store, ingest.ChainOptions{})
			p.run(t, tr.source(t, "fail"))
			now := time.Now()
			tr.send(t, msg("pump", `{"type":"sensor"}`), msg("fine", fmt.Sprintf(`{"type":"sensor","ts":%d}`, now.UnixMilli())))
			p.waitApplied(t, "pump", "fine")
			before := p.device(t, "fine").Deadline

			tr.send(t, msg("fine", fmt.Sprintf(`{"status":"fail","reason":"old news","ts":%d}`, now.Add(-10*time.Second).UnixMilli())),
				msg("pump", `{"status":"fail","reason":"valve stuck"}`),
				msg("loud", `{"status":"fail","reason":"`+strings.Repeat("x", ingest.MaxReasonLen+1)+`"}`))
			p.awaitMarked(t, deadline.CauseReported, "late", 1)
			p.awaitMarked(t, deadline.CauseReported, "moved", 1)
			require.Equal(t, before, p.device(t, "fine").Deadline, "a failure older than the last signal changes nothing")
			require.Eventually(t, func() bool { return len(p.dl.letters()) == 1 }, 30*time.Second, 5*time.Millisecond)
			require.Equal(t, ingest.ReasonBadReason, p.dl.letters()[0].Reason)

			c := p.awaitClaim(t, "pump")
			require.NotNil(t, c.Cause)
			require.Equal(t, deadline.CauseReported, c.Cause.Kind)
			require.Equal(t, "valve stuck", c.Cause.Reason)
			require.Equal(t, "sensor", c.Type)
		})
	}
}

// A flood of offline messages for devices Redis does not know creates nothing in Redis and is counted;
// a device's signal amid the flood is stored.
func TestOfflineFloodForUnknownDevices(t *testing.T) {
	p, _, pub, rdb := presencePipeline(t)
	publish(t, pub, "devices/known/heartbeat", "")
	p.waitApplied(t, "known")
	first := p.device(t, "known").Deadline
	keys := func() int64 {
		n, err := rdb.DBSize(context.Background()).Result()
		require.NoError(t, err)
		return n
	}
	before := keys()
	const flood = 5000
	toks := make([]mqtt.Token, 0, flood)
	for i := range flood {
		toks = append(toks, pub.Publish(fmt.Sprintf("devices/ghost-%05d/status", i), 1, false, "offline"))
		if i == flood/2 {
			publish(t, pub, "devices/known/heartbeat", "")
		}
	}
	for _, tok := range toks {
		require.True(t, tok.WaitTimeout(30*time.Second))
	}
	require.Eventually(t, func() bool { return p.device(t, "known").Deadline.After(first) }, 30*time.Second, 5*time.Millisecond,
		"the signal amid the flood is stored")
	require.Eventually(t, func() bool {
		return counter(t, p.reg, "heartbeatd_signals_marked_total", map[string]string{"cause": "offline", "result": "unknown"}) == flood
	}, 60*time.Second, 10*time.Millisecond, "every offline message is counted")
	require.Equal(t, before, keys(), "no key was created for the unknown devices")
}

// A heartbeat and the failure its device reports right after it, published back to back over MQTT, end
// as the failure: the source's parallel workers must not let the failure look older than the heartbeat
// (each message's time is its arrival, read in the broker's order), or it would be dropped as late.
func TestMQTTFailureRightAfterAHeartbeat(t *testing.T) {
	tr := newMQTTTransport(t)
	p := startPipeline(t, policyStore(t, testenv.StartRedis(t).Client(t)), ingest.ChainOptions{})
	p.run(t, tr.source(t, "order"))
	ids := devices("pump", 400)
	var stream []raw
	for _, id := range ids {
		stream = append(stream, msg(id, `{"type":"sensor"}`), msg(id, `{"status":"fail","reason":"probe broken"}`))
	}
	tr.send(t, stream...)
	p.awaitMarked(t, deadline.CauseReported, "moved", float64(len(ids)))
	require.Zero(t, counter(t, p.reg, "heartbeatd_signals_marked_total", map[string]string{"cause": deadline.CauseReported, "result": "late"}),
		"failures taken for older than the heartbeat before them")
	// Every one is due at its failure, with its cause. (A failure whose write overtook its heartbeat's,
	// the two in different batches, is put back by the claim: the heartbeat is older than it.)
	causes := map[string]string{}
	require.Eventually(t, func() bool {
		res, err := p.store.Claim(t.Context(), testenv.AllSlots(p.store.Slots()),
			deadline.ClaimOptions{Now: time.Now(), Lease: time.Minute, Batch: 1000})
		require.NoError(t, err)
		for _, c := range res.Claims {
			require.NotNil(t, c.Cause, c.Device)
			require.Equal(t, c.State.Deadline, c.Cause.LastSeen.UnixMilli(), "%s: due at the failure", c.Device)
			causes[c.Device] = c.Cause.Kind + ": " + c.Cause.Reason
		}
		return len(causes) == len(ids)
	}, 10*time.Second, 10*time.Millisecond)
	for _, id := range ids {
		require.Equal(t, "reported: probe broken", causes[id], id)
	}
}
