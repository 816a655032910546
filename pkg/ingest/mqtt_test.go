package ingest_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/ingest"
)

func newMQTTSource(tb testing.TB, broker, id string, mod func(*ingest.MQTTOptions)) *ingest.MQTTSource {
	tb.Helper()
	opts := ingest.MQTTOptions{
		Brokers: []string{broker}, ClientID: id, QoS: 1, Subscriptions: mqttSubscriptions,
		MaxReconnectInterval: 500 * time.Millisecond, DrainTimeout: 500 * time.Millisecond,
	}
	if mod != nil {
		mod(&opts)
	}
	src, err := ingest.NewMQTTSource(opts)
	require.NoError(tb, err)
	return src
}

func TestMQTTTypeFromTopic(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		broker := testenv.StartMosquitto(t)
		p := startPipeline(t, newStore(t, rdb), ingest.ChainOptions{})
		p.run(t, newMQTTSource(t, broker.Addr, "heartbeatd", nil))
		pub := mqttClient(t, broker.Addr, "publisher", nil)
		for topic, payload := range map[string]string{
			"fleet/gateway/gw-1/telemetry": `{"temp":21}`,
			"fleet/gateway/gw-2/telemetry": `{"type":"sensor"}`, // the payload's type wins
			"fleet/toaster/gw-3/telemetry": "",
			"gateways/ingest":              `{"type":"gateway"}`, // no {device_id} level, none in the payload
		} {
			tok := pub.Publish(topic, 1, false, payload)
			tok.Wait()
			require.NoError(t, tok.Error())
		}
		p.waitApplied(t, "gw-1", "gw-2", "gw-3")
		require.Equal(t, "gateway", p.device(t, "gw-1").Type)
		require.Equal(t, "sensor", p.device(t, "gw-2").Type)
		require.Equal(t, "default", p.device(t, "gw-3").Type, "an unknown name gets the default type")
		require.Eventually(t, func() bool { return len(p.dl.letters()) == 1 }, 10*time.Second, 5*time.Millisecond)
		require.Equal(t, ingest.ReasonNoDeviceID, p.dl.letters()[0].Reason)
	})
}

// TestMQTTInventedTypeNamesThenReload: a publisher inventing a type name per message on the default
// fleet/{device_type}/... subscription records none of them; the configured types keep their policies,
// and a name added by a reload takes effect from its device's next signal.
func TestMQTTInventedTypeNamesThenReload(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	broker := testenv.StartMosquitto(t)
	ctx := t.Context()
	store, err := deadline.New(rdb, deadline.Options{Slots: 16, Timeout: func(name string) time.Duration {
		if name == "invented-7" {
			return time.Hour
		}
		return timeoutOf(name)
	}})
	require.NoError(t, err)
	configured := []string{"default", "gateway"}
	require.NoError(t, store.Load(ctx, configured...))
	var known atomic.Pointer[[]string]
	known.Store(&configured)
	p := startPipeline(t, store, ingest.ChainOptions{KnownType: func(name string) bool { return slices.Contains(*known.Load(), name) }})
	p.run(t, newMQTTSource(t, broker.Addr, "heartbeatd", nil))
	pub := mqttClient(t, broker.Addr, "publisher", nil)
	publish := func(topic string) mqtt.Token { return pub.Publish(topic, 1, false, "") }

	const invented = 2000
	toks := []mqtt.Token{publish("fleet/gateway/gw/telemetry")}
	ids := []string{"gw"}
	for i := range invented {
		ids = append(ids, fmt.Sprint("dev-", i))
		toks = append(toks, publish(fmt.Sprintf("fleet/invented-%d/dev-%d/telemetry", i, i)))
	}
	for _, tok := range toks {
		require.True(t, tok.WaitTimeout(30*time.Second))
		require.NoError(t, tok.Error())
	}
	p.waitApplied(t, ids...)
	sent := time.Now()
	registry, err := rdb.HKeys(ctx, store.Keys().Types()).Result()
	require.NoError(t, err)
	require.ElementsMatch(t, configured, registry, "Redis records only configured names")
	require.Equal(t, "gateway", p.device(t, "gw").Type)
	require.WithinDuration(t, sent.Add(30*time.Second), p.device(t, "gw").Deadline, 10*time.Second)
	require.Equal(t, "default", p.device(t, "dev-7").Type)
	require.WithinDuration(t, sent.Add(time.Minute), p.device(t, "dev-7").Deadline, 10*time.Second)
	require.Equal(t, float64(invented), counter(t, p.reg, "heartbeatd_signals_unknown_type_total", nil))

	// The reload: Redis first, then the policies the chain reads, as the daemon does.
	reloaded := append(slices.Clone(configured), "invented-7")
	require.NoError(t, store.Load(ctx, reloaded...))
	known.Store(&reloaded)
	require.Equal(t, "default", p.device(t, "dev-7").Type, "nothing changes before the device signals again")
	tok := publish("fleet/invented-7/dev-7/telemetry")
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.Eventually(t, func() bool {
		p.rec.mu.Lock()
		defer p.rec.mu.Unlock()
		return p.rec.applied["dev-7"] == 2
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, "invented-7", p.device(t, "dev-7").Type)
	require.WithinDuration(t, time.Now().Add(time.Hour), p.device(t, "dev-7").Deadline, 10*time.Second)
	registry, err = rdb.HKeys(ctx, store.Keys().Types()).Result()
	require.NoError(t, err)
	require.ElementsMatch(t, reloaded, registry)
}

// TestMQTTSessionBacklogAfterRestart: messages left unacknowledged by a heartbeatd that stopped while
// Redis failed, and messages sent while no heartbeatd ran, all arrive at the next one with the same
// client id.
func TestMQTTSessionBacklogAfterRestart(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		broker := testenv.StartMosquitto(t)
		store := newStore(t, rdb)
		ids := devices("backlog", 400)
		send := newMQTTTransportOn(t, broker.Addr)

		first := startPipeline(t, store, ingest.ChainOptions{})
		first.rec.failing.Store(true)
		src := newMQTTSource(t, broker.Addr, "heartbeatd", nil)
		first.run(t, src)
		send(t, rawFor(ids[:100], "")...)
		require.Eventually(t, func() bool { return first.rec.calls.Load() >= 2 }, 10*time.Second, 5*time.Millisecond)
		require.NoError(t, first.stop(src))
		first.stopChain() // the process ends: what it held was never acknowledged
		require.Zero(t, first.rec.count())

		send(t, rawFor(ids[100:], "")...) // while no heartbeatd runs

		second := startPipeline(t, store, ingest.ChainOptions{})
		second.run(t, newMQTTSource(t, broker.Addr, "heartbeatd", nil))
		second.waitApplied(t, ids...)
	})
}

// newMQTTTransportOn returns a send function publishing to broker.
func newMQTTTransportOn(tb testing.TB, broker string) func(tb testing.TB, msgs ...raw) {
	pub := mqttClient(tb, broker, "publisher", nil)
	return func(tb testing.TB, msgs ...raw) {
		tb.Helper()
		for _, m := range msgs {
			tok := pub.Publish(mqttTopic(m.device), 1, false, m.payload)
			require.True(tb, tok.WaitTimeout(10*time.Second))
			require.NoError(tb, tok.Error())
		}
	}
}

func TestMQTTSharedSubscriptionSplitsLoad(t *testing.T) {
	broker := testenv.StartMosquitto(t)
	store := newStore(t, testenv.StartRedis(t).Client(t))
	shared := func(o *ingest.MQTTOptions) {
		o.Subscriptions = []ingest.Subscription{{Topic: "devices/{device_id}/heartbeat", SharedGroup: "heartbeatd"}}
	}
	a, b := startPipeline(t, store, ingest.ChainOptions{}), startPipeline(t, store, ingest.ChainOptions{})
	srcA := newMQTTSource(t, broker.Addr, "heartbeatd-a", shared)
	require.Equal(t, []string{"$share/heartbeatd/devices/+/heartbeat"}, srcA.Filters())
	a.run(t, srcA)
	b.run(t, newMQTTSource(t, broker.Addr, "heartbeatd-b", shared))

	ids := devices("shared", 400)
	newMQTTTransportOn(t, broker.Addr)(t, rawFor(ids, "")...)
	require.Eventually(t, func() bool {
		n := 0
		for _, id := range ids {
			if a.rec.has(id) || b.rec.has(id) {
				n++
			}
		}
		return n == len(ids)
	}, 30*time.Second, 5*time.Millisecond)
	require.Positive(t, a.rec.count(), "replica a got a share")
	require.Positive(t, b.rec.count(), "replica b got a share")
	require.Equal(t, len(ids), a.rec.count()+b.rec.count(), "each message went to one replica")
}

func TestMQTTRetainedMessagesAreNotSignals(t *testing.T) {
	broker := testenv.StartMosquitto(t)
	pub := mqttClient(t, broker.Addr, "publisher", nil)
	// Not empty: an empty retained payload clears the topic's retained message instead of setting one.
	tok := pub.Publish(mqttTopic("long-gone"), 1, true, "{}")
	tok.Wait()
	require.NoError(t, tok.Error())

	p := startPipeline(t, newStore(t, testenv.StartRedis(t).Client(t)), ingest.ChainOptions{})
	p.run(t, newMQTTSource(t, broker.Addr, "heartbeatd", nil))
	require.Eventually(t, func() bool {
		return counter(t, p.reg, "heartbeatd_signals_total", map[string]string{"result": "retained"}) == 1
	}, 10*time.Second, 5*time.Millisecond)
	newMQTTTransportOn(t, broker.Addr)(t, msg("alive", ""))
	p.waitApplied(t, "alive")
	require.False(t, p.rec.has("long-gone"))
}

func TestMQTTTLS(t *testing.T) {
	files := testenv.GenerateTLS(t)
	broker := testenv.StartMosquitto(t, testenv.MosquittoOptions{TLS: files, RequireClientCert: true})
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(files.CAPEM))
	clientCert, err := tls.LoadX509KeyPair(files.ClientCertFile, files.ClientKeyFile)
	require.NoError(t, err)
	good := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{clientCert}, MinVersion: tls.VersionTLS12}

	t.Run("mutual TLS", func(t *testing.T) {
		p := startPipeline(t, newStore(t, testenv.StartRedis(t).Client(t)), ingest.ChainOptions{})
		p.run(t, newMQTTSource(t, broker.TLSAddr, "heartbeatd", func(o *ingest.MQTTOptions) { o.TLS = good }))
		pub := mqttClient(t, broker.TLSAddr, "publisher", good)
		tok := pub.Publish(mqttTopic("over-tls"), 1, false, "")
		tok.Wait()
		require.NoError(t, tok.Error())
		p.waitApplied(t, "over-tls")
	})
	for name, cfg := range map[string]*tls.Config{
		"untrusted server": {Certificates: []tls.Certificate{clientCert}, MinVersion: tls.VersionTLS12}, // system roots
		"no client cert":   {RootCAs: roots, MinVersion: tls.VersionTLS12},
	} {
		t.Run(name, func(t *testing.T) {
			p := startPipeline(t, newStore(t, testenv.StartRedis(t).Client(t)), ingest.ChainOptions{})
			src := newMQTTSource(t, broker.TLSAddr, "heartbeatd-"+name, func(o *ingest.MQTTOptions) { o.TLS = cfg })
			err := src.Run(t.Context(), p.chain)
			require.Error(t, err, "a TLS failure is a configuration error, not retried")
			require.Contains(t, err.Error(), broker.TLSAddr, "the error names the broker")
			require.Contains(t, err.Error(), "tls", "the error says what failed")
		})
	}
}
