package ingest_test

import (
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/holdback"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// sharedSubscription subscribes as a member of the shared group "heartbeatd".
func sharedSubscription(o *ingest.MQTTOptions) {
	o.Subscriptions = []ingest.Subscription{{Topic: "devices/{device_id}/heartbeat", SharedGroup: "heartbeatd"}}
}

// TestMQTTSharedMemberLeavesItsShare: a replica of a shared group that stops hands its share to the
// others. With a persistent session the broker (mosquitto 2.0) went on routing every other message of
// the group to the stopped replica's session, where nobody read them.
func TestMQTTSharedMemberLeavesItsShare(t *testing.T) {
	broker := testenv.StartMosquitto(t)
	store := policyStore(t, testenv.StartRedis(t).Client(t))
	a, b := startPipeline(t, store, ingest.ChainOptions{}), startPipeline(t, store, ingest.ChainOptions{})
	srcA := newMQTTSource(t, broker.Addr, "heartbeatd-a", sharedSubscription)
	a.run(t, srcA)
	b.run(t, newMQTTSource(t, broker.Addr, "heartbeatd-b", sharedSubscription))
	send := newMQTTTransportOn(t, broker.Addr)
	send(t, rawFor(devices("both", 20), "")...)
	require.Eventually(t, func() bool { return a.rec.count()+b.rec.count() == 20 }, 10*time.Second, 5*time.Millisecond)

	require.NoError(t, a.stop(srcA))
	ids := devices("after", 100)
	send(t, rawFor(ids, "")...)
	b.waitApplied(t, ids...)
}

// TestMQTTTakeOverAFrozenMember: a member of the shared group that stopped reading without
// disconnecting (a frozen process, a half-open connection) keeps its share until the broker's keep-alive
// check drops it. TakenOver connects with its client id: the broker closes its connection and ends its
// session (persistent here, as an older heartbeatd's), and the whole group's traffic reaches the live
// member at once.
func TestMQTTTakeOverAFrozenMember(t *testing.T) {
	broker := testenv.StartMosquitto(t)
	p := startPipeline(t, policyStore(t, testenv.StartRedis(t).Client(t)), ingest.ChainOptions{})
	src := newMQTTSource(t, broker.Addr, "heartbeatd-b", sharedSubscription)
	require.Equal(t, []holdback.Share{{Name: "mqtt:$share/heartbeatd/devices/+/heartbeat", Signals: "mqtt:devices/+/heartbeat",
		Member: "heartbeatd-b", Release: 47 * time.Second}}, src.Shares(), "keep-alive 30s: 45s, and the margin")
	p.run(t, src)

	frozen := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(broker.Addr).SetClientID("heartbeatd-a").SetCleanSession(false).
		SetAutoReconnect(false).SetAutoAckDisabled(true).SetKeepAlive(time.Minute))
	tok := frozen.Connect()
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())
	t.Cleanup(func() { frozen.Disconnect(0) })
	// It never acknowledges what it gets: what the broker sends it is as good as lost.
	tok = frozen.Subscribe("$share/heartbeatd/devices/+/heartbeat", 1, func(mqtt.Client, mqtt.Message) {})
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())

	send := newMQTTTransportOn(t, broker.Addr)
	before := devices("before", 40)
	send(t, rawFor(before, "")...)
	require.Eventually(t, func() bool { return p.rec.count() > 0 }, 10*time.Second, 5*time.Millisecond)
	require.Less(t, p.rec.count(), len(before), "the frozen member got its share")

	since := time.Now()
	require.False(t, src.TakenOver("heartbeatd-b", since), "never itself")
	require.Eventually(t, func() bool { return src.TakenOver("heartbeatd-a", since) }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return !frozen.IsConnectionOpen() }, 10*time.Second, 10*time.Millisecond,
		"the broker closed the frozen member's connection")
	after := devices("after", 40)
	send(t, rawFor(after, "")...)
	p.waitApplied(t, after...)
	require.False(t, src.TakenOver("heartbeatd-a", time.Now().Add(time.Hour)), "done before that time: not yet again")
}
