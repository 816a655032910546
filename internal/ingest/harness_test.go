package ingest_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/internal/testenv/deadlinetest"
)

var policyTimeouts = map[string]time.Duration{"default": time.Minute, "gateway": 30 * time.Second, "sensor": 10 * time.Minute}

func timeoutOf(name string) time.Duration {
	if d, ok := policyTimeouts[name]; ok {
		return d
	}
	return policyTimeouts["default"]
}

func knownType(name string) bool { _, ok := policyTimeouts[name]; return ok }

// TestMain stops the Redis Cluster the tests share (see testenv.RedisBackends).
func TestMain(m *testing.M) { testenv.Main(m) }

// policyStore is a deadline store on rdb timed by policyTimeouts (16 slots). The tests that write through
// every slot, hand messages over between consumers or resume a backlog run on every Redis backend
// (testenv.EachBackend): on a cluster a batch is split into one script call per slot, and an
// acknowledgement must still wait for every one. Tests that kill Redis, or only exercise broker TLS and
// dead letters, stay on a standalone server of their own (the cluster is shared by the package).
func policyStore(tb testing.TB, rdb redis.UniversalClient) *deadline.Store {
	tb.Helper()
	return deadlinetest.NewStore(tb, rdb, deadline.Options{Slots: 16, Timeout: timeoutOf}, "default", "gateway", "sensor")
}

// recorder sits between the chain and the store: it remembers which devices Redis acknowledged (what a
// source may acknowledge at its broker) and can make Redis fail on demand.
type recorder struct {
	next    ingest.Refresher
	failing atomic.Bool
	slow    atomic.Int64 // ns each refresh waits before it is written: a Redis that answers slowly
	calls   atomic.Int64

	mu      sync.Mutex
	applied map[string]int
}

func newRecorder(next ingest.Refresher) *recorder {
	return &recorder{next: next, applied: map[string]int{}}
}

func (r *recorder) Refresh(ctx context.Context, sigs []deadline.Signal) error {
	r.calls.Add(1)
	if r.failing.Load() {
		return fmt.Errorf("recorder: redis made to fail")
	}
	if d := time.Duration(r.slow.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := r.next.Refresh(ctx, sigs); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range sigs {
		r.applied[s.Device]++
	}
	return nil
}

// Late asks the store which signals are late, so the chain leaves them out as it does in production.
func (r *recorder) Late(ctx context.Context, sigs []deadline.Signal, received []time.Time) ([]bool, error) {
	if l, ok := r.next.(interface {
		Late(context.Context, []deadline.Signal, []time.Time) ([]bool, error)
	}); ok {
		return l.Late(ctx, sigs, received)
	}
	return nil, nil
}

// MarkEarlier passes reported failures and offline messages to the store, as the chain does in
// production; Redis made to fail refuses them too.
func (r *recorder) MarkEarlier(ctx context.Context, marks []deadline.Mark) ([]deadline.MarkResult, error) {
	if r.failing.Load() {
		return nil, fmt.Errorf("recorder: redis made to fail")
	}
	return r.next.(ingest.Marker).MarkEarlier(ctx, marks)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.applied)
}

func (r *recorder) has(device string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applied[device] > 0
}

// raw is one message as a transport sends it: the device goes into the MQTT topic or the Kafka key;
// "" puts it nowhere (the MQTT topic "gateways/ingest", no Kafka key).
type raw struct {
	device  string
	payload []byte
}

func msg(device, payload string) raw { return raw{device: device, payload: []byte(payload)} }

// transport is one broker with what the shared test bodies need to drive it.
type transport struct {
	name  string
	topic func(device string) string // the topic a raw message lands on
	send  func(tb testing.TB, msgs ...raw)
	// source builds a source on the broker; id distinguishes consumers (MQTT client id, Kafka member).
	source func(tb testing.TB, id string) ingest.Source
	stop   func(tb testing.TB)
	start  func(tb testing.TB)
}

var mqttSubscriptions = []ingest.Subscription{
	{Topic: "devices/{device_id}/heartbeat"},
	{Topic: "fleet/{device_type}/{device_id}/telemetry"},
	{Topic: "gateways/ingest"},
}

func mqttTopic(device string) string {
	if device == "" {
		return "gateways/ingest"
	}
	return "devices/" + device + "/heartbeat"
}

func newMQTTTransport(tb testing.TB, opts ...testenv.MosquittoOptions) *transport {
	tb.Helper()
	broker := testenv.StartMosquitto(tb, opts...)
	pub := mqttClient(tb, broker.Addr, "publisher", nil)
	return &transport{
		name:  ingest.SourceMQTT,
		topic: mqttTopic,
		send: func(tb testing.TB, msgs ...raw) {
			tb.Helper()
			toks := make([]mqtt.Token, 0, len(msgs))
			for _, m := range msgs {
				toks = append(toks, pub.Publish(mqttTopic(m.device), 1, false, m.payload))
			}
			for _, tok := range toks {
				require.True(tb, tok.WaitTimeout(30*time.Second), "publish timed out")
				require.NoError(tb, tok.Error())
			}
		},
		source: func(tb testing.TB, id string) ingest.Source {
			tb.Helper()
			src, err := ingest.NewMQTTSource(ingest.MQTTOptions{
				Brokers: []string{broker.Addr}, ClientID: "heartbeatd-" + id, QoS: 1, Subscriptions: mqttSubscriptions,
				MaxReconnectInterval: 500 * time.Millisecond, DrainTimeout: time.Second,
			})
			require.NoError(tb, err)
			return src
		},
		stop:  func(tb testing.TB) { broker.Stop(tb) },
		start: func(tb testing.TB) { broker.Start(tb) },
	}
}

// mqttClient is a plain paho client with auto-reconnect, for publishing in tests.
func mqttClient(tb testing.TB, broker, id string, tlsCfg *tls.Config) mqtt.Client {
	tb.Helper()
	o := mqtt.NewClientOptions().AddBroker(broker).SetClientID(id).SetAutoReconnect(true).
		SetMaxReconnectInterval(200 * time.Millisecond).SetConnectRetry(true).SetConnectRetryInterval(100 * time.Millisecond)
	if tlsCfg != nil {
		o.SetTLSConfig(tlsCfg)
	}
	c := mqtt.NewClient(o)
	tok := c.Connect()
	require.True(tb, tok.WaitTimeout(10*time.Second), "connect %s", broker)
	require.NoError(tb, tok.Error())
	tb.Cleanup(func() { c.Disconnect(0) })
	return c
}

const signalTopic = "device-signals"

func newKafkaTransport(tb testing.TB, partitions int) (*transport, *testenv.Kafka) {
	tb.Helper()
	// Persist: a restarted broker keeps its log and the group's offsets, as a real one does.
	k := testenv.StartKafka(tb, testenv.KafkaOptions{Topics: []string{signalTopic}, Partitions: partitions, Persist: true})
	w := kafkaWriter(k.Addrs, nil, nil)
	tb.Cleanup(func() { _ = w.Close() })
	return &transport{
		name:  ingest.SourceKafka,
		topic: func(string) string { return signalTopic },
		send: func(tb testing.TB, msgs ...raw) {
			tb.Helper()
			km := make([]kafka.Message, len(msgs))
			for i, m := range msgs {
				km[i] = kafka.Message{Value: m.payload}
				if m.device != "" {
					km[i].Key = []byte(m.device)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.NoError(tb, w.WriteMessages(ctx, km...))
		},
		source: func(tb testing.TB, id string) ingest.Source {
			tb.Helper()
			return kafkaSource(tb, k.Addrs, nil, nil)
		},
		stop:  func(tb testing.TB) { k.Stop() },
		start: func(tb testing.TB) { k.Start(tb) },
	}, k
}

func kafkaWriter(addrs []string, tlsCfg *tls.Config, mech sasl.Mechanism) *kafka.Writer {
	return &kafka.Writer{
		Addr: kafka.TCP(addrs...), Topic: signalTopic, Balancer: &kafka.Hash{}, BatchTimeout: time.Millisecond,
		BatchSize: 1000, RequiredAcks: kafka.RequireAll, MaxAttempts: 20,
		Transport: &kafka.Transport{TLS: tlsCfg, SASL: mech},
	}
}

func kafkaSource(tb testing.TB, addrs []string, tlsCfg *tls.Config, mech sasl.Mechanism) *ingest.KafkaSource {
	tb.Helper()
	src, err := ingest.NewKafkaSource(ingest.KafkaOptions{
		Brokers: addrs, Topics: []string{signalTopic}, GroupID: "heartbeatd", TLS: tlsCfg, SASL: mech,
		HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 6 * time.Second, RebalanceTimeout: 3 * time.Second,
		ProbeInterval: 100 * time.Millisecond, CommitInterval: 20 * time.Millisecond, DrainTimeout: time.Second, Logger: zaptest.NewLogger(tb),
	})
	require.NoError(tb, err)
	return src
}

// pipeline is a running chain (on a recorder over a real store) with its sources.
type pipeline struct {
	chain *ingest.Chain
	rec   *recorder
	store *deadline.Store
	dl    *fakeDeadLetters
	reg   *prometheus.Registry

	stopChain func()
	mu        sync.Mutex
	sources   map[ingest.Source]func() error
}

func startPipeline(tb testing.TB, store *deadline.Store, opts ingest.ChainOptions) *pipeline {
	tb.Helper()
	p := &pipeline{rec: newRecorder(store), store: store, dl: &fakeDeadLetters{}, reg: prometheus.NewRegistry(), sources: map[ingest.Source]func() error{}}
	opts.Registerer = p.reg
	if opts.KnownType == nil {
		opts.KnownType = knownType
	}
	c, err := ingest.NewChain(p.rec, p.dl, opts)
	require.NoError(tb, err)
	p.chain = c
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	var once sync.Once
	p.stopChain = func() { once.Do(func() { cancel(); <-done }) }
	tb.Cleanup(func() {
		p.mu.Lock()
		srcs := make([]ingest.Source, 0, len(p.sources))
		for s := range p.sources {
			srcs = append(srcs, s)
		}
		p.mu.Unlock()
		for _, s := range srcs {
			_ = p.stop(s) // sources before the chain they feed
		}
		p.stopChain()
	})
	return p
}

// run starts src and waits until it reports itself connected.
func (p *pipeline) run(tb testing.TB, src ingest.Source) {
	tb.Helper()
	done := p.start(tb, src)
	require.Eventually(tb, func() bool {
		select {
		case err := <-done:
			done <- err
			require.NoError(tb, err, "source stopped before connecting")
		default:
		}
		return src.Health().Connected
	}, 20*time.Second, 5*time.Millisecond, "%s source connects", src.Name())
}

// start starts src; the channel receives what its Run returned.
func (p *pipeline) start(tb testing.TB, src ingest.Source) chan error {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, p.chain) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	p.mu.Lock()
	p.sources[src] = stop
	p.mu.Unlock()
	return done
}

// stop stops a source and returns what its Run returned.
func (p *pipeline) stop(src ingest.Source) error {
	p.mu.Lock()
	stop := p.sources[src]
	delete(p.sources, src)
	p.mu.Unlock()
	if stop == nil {
		return nil
	}
	return stop()
}

// waitApplied waits until Redis acknowledged a write for every device.
func (p *pipeline) waitApplied(tb testing.TB, devices ...string) {
	tb.Helper()
	require.Eventually(tb, func() bool {
		for _, d := range devices {
			if !p.rec.has(d) {
				return false
			}
		}
		return true
	}, 30*time.Second, 5*time.Millisecond, "devices applied")
}

func (p *pipeline) device(tb testing.TB, id string) deadline.Device {
	tb.Helper()
	d, found, err := p.store.Device(context.Background(), id)
	require.NoError(tb, err)
	require.True(tb, found, "device %s in Redis", id)
	return d
}

// devices names n devices prefix-00000, … (testenv.DeviceIDs), as the source tests and benchmarks do.
func devices(prefix string, n int) []string { return testenv.DeviceIDs(prefix, n) }

func rawFor(ids []string, payload string) []raw {
	out := make([]raw, len(ids))
	for i, id := range ids {
		out[i] = msg(id, payload)
	}
	return out
}
