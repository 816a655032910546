package ingest_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// benchSignals is how many signals one benchmark iteration moves: HB_BENCH_SIGNALS, default 200k.
// `-benchtime=1x` with a small HB_BENCH_SIGNALS keeps the benchmarks compiling and working in CI.
func benchSignals() int { return benchrig.SizeFromEnv("HB_BENCH_SIGNALS", 200_000) }

const benchPayload = `{"type":"gateway","ts":%d}`

// counting passes refreshes on and counts the signals Redis acknowledged.
type counting struct {
	next ingest.Refresher
	n    atomic.Int64
	done chan struct{}
	want int64
}

func (c *counting) Refresh(ctx context.Context, sigs []deadline.Signal) error {
	if err := c.next.Refresh(ctx, sigs); err != nil {
		return err
	}
	if c.n.Add(int64(len(sigs))) >= c.want {
		select {
		case <-c.done:
		default:
			close(c.done)
		}
	}
	return nil
}

// refreshRate measures deadline.Store.Refresh alone on the same Redis and devices: batches of 256
// signals, one at a time, as BenchmarkRefresh in internal/deadline does. The ingest rates are read against it.
func refreshRate(b *testing.B, store *deadline.Store, ids []string) float64 {
	b.Helper()
	ctx := context.Background()
	batch := make([]deadline.Signal, 0, 256)
	start := time.Now()
	n := 0
	for i, id := range ids {
		batch = append(batch, deadline.Signal{Device: id, Type: "gateway", Seen: time.Now()})
		if len(batch) == cap(batch) || i == len(ids)-1 {
			require.NoError(b, store.Refresh(ctx, batch))
			n += len(batch)
			batch = batch[:0]
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// runChain starts a chain on refresher for one benchmark iteration.
func runChain(b *testing.B, refresher ingest.Refresher) (*ingest.Chain, func()) {
	b.Helper()
	chain, err := ingest.NewChain(refresher, nil, ingest.ChainOptions{KnownType: knownType})
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = chain.Run(ctx) }()
	return chain, func() { cancel(); <-done }
}

// BenchmarkIngestKafka: signals/s from a preloaded topic (kfake, 4 partitions) through the Kafka source
// and the chain into Redis, each iteration a new consumer group reading the whole topic. Reported beside
// the plain refresh rate on the same Redis (refresh-signals/s) and their ratio (x-refresh).
func BenchmarkIngestKafka(b *testing.B) {
	n := benchSignals()
	store := policyStore(b, testenv.StartRedis(b).Client(b))
	ids := devices("bench", n)
	k := testenv.StartKafka(b, testenv.KafkaOptions{Topics: []string{signalTopic}, Partitions: 4})
	w := kafkaWriter(k.Addrs, nil, nil)
	w.BatchSize = 5000
	defer w.Close()
	msgs := make([]kafka.Message, 0, 10_000)
	ts := time.Now().UnixMilli()
	for i, id := range ids {
		msgs = append(msgs, kafka.Message{Key: []byte(id), Value: fmt.Appendf(nil, benchPayload, ts)})
		if len(msgs) == cap(msgs) || i == n-1 {
			require.NoError(b, w.WriteMessages(context.Background(), msgs...))
			msgs = msgs[:0]
		}
	}
	refresh := refreshRate(b, store, ids)

	benchDrain(b, store, n, func(i int) ingest.Source {
		src, err := ingest.NewKafkaSource(ingest.KafkaOptions{Brokers: k.Addrs, Topics: []string{signalTopic}, GroupID: fmt.Sprintf("bench-%d", i)})
		require.NoError(b, err)
		return src
	}, baseline{"refresh-signals/s", "x-refresh", refresh})
}

// baseline is a rate a benchmark's signals/s is read against: reported as unit, with the ratio as ratioUnit.
type baseline struct {
	unit, ratioUnit string
	rate            float64
}

// benchDrain runs b's iterations, each draining n signals from a fresh source open(i) (made outside the
// timer) into store, and reports their signals/s and, for each baseline, its rate and the ratio to it.
func benchDrain(b *testing.B, store *deadline.Store, n int, open func(i int) ingest.Source, baselines ...baseline) {
	b.Helper()
	var elapsed time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		elapsed += drain(b, store, open(i), n)
	}
	rate := float64(n*b.N) / elapsed.Seconds()
	b.ReportMetric(rate, "signals/s")
	for _, base := range baselines {
		b.ReportMetric(base.rate, base.unit)
		b.ReportMetric(rate/base.rate, base.ratioUnit)
	}
}

// drain runs src through a fresh chain into store until n signals are applied and returns how long that
// took from the source's start; setup and teardown stay outside the timer.
func drain(b *testing.B, store *deadline.Store, src ingest.Source, n int) time.Duration {
	b.Helper()
	b.StopTimer()
	cnt := &counting{next: store, done: make(chan struct{}), want: int64(n)}
	chain, stopChain := runChain(b, cnt)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.StartTimer()
	start := time.Now()
	go func() { defer close(done); _ = src.Run(ctx, chain) }()
	select {
	case <-cnt.done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("applied %d of %d", cnt.n.Load(), n)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	<-done
	stopChain()
	b.StartTimer()
	return elapsed
}

// BenchmarkIngestMQTT: signals/s from a persistent session's backlog on mosquitto through the MQTT source
// and the chain into Redis; beside it, the rate a plain QoS 1 subscriber (auto-ack, no work) drains the
// same backlog from the same broker (plain-subscriber/s), and the refresh rate (refresh-signals/s).
func BenchmarkIngestMQTT(b *testing.B) {
	n := benchSignals()
	broker := testenv.StartMosquitto(b)
	store := policyStore(b, testenv.StartRedis(b).Client(b))
	ids := devices("bench", n)
	pub := mqttClient(b, broker.Addr, "bench-publisher", nil)
	ts := time.Now().UnixMilli()
	// QoS 1 publishes in flight are bounded by MQTT's 16-bit packet ids (paho: "no message IDs
	// available"), so the backlog goes out in windows that each wait for their PUBACKs.
	const window = 16_384
	publishBacklog := func() {
		toks := make([]mqtt.Token, 0, window)
		for i, id := range ids {
			toks = append(toks, pub.Publish(mqttTopic(id), 1, false, fmt.Appendf(nil, benchPayload, ts)))
			if len(toks) < window && i < len(ids)-1 {
				continue
			}
			for _, t := range toks {
				require.True(b, t.WaitTimeout(time.Minute))
				require.NoError(b, t.Error())
			}
			toks = toks[:0]
		}
	}
	refresh := refreshRate(b, store, ids)
	plain := plainSubscriberRate(b, broker.Addr, n, publishBacklog)

	benchDrain(b, store, n, func(i int) ingest.Source {
		clientID := fmt.Sprintf("heartbeatd-bench-%d", i)
		// Create the session, leave, queue the backlog in it.
		primeSession(b, broker.Addr, clientID)
		publishBacklog()
		src, err := ingest.NewMQTTSource(ingest.MQTTOptions{Brokers: []string{broker.Addr}, ClientID: clientID, QoS: 1, Subscriptions: mqttSubscriptions})
		require.NoError(b, err)
		return src
	}, baseline{"plain-subscriber/s", "x-plain", plain}, baseline{"refresh-signals/s", "x-refresh", refresh})
}

// primeSession connects clientID with a persistent session subscribed to the signal topics, then leaves,
// so the broker queues what is published next.
func primeSession(b *testing.B, broker, clientID string) {
	b.Helper()
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(broker).SetClientID(clientID).SetCleanSession(false))
	tok := c.Connect()
	require.True(b, tok.WaitTimeout(10*time.Second))
	require.NoError(b, tok.Error())
	tok = c.Subscribe("devices/+/heartbeat", 1, nil)
	require.True(b, tok.WaitTimeout(10*time.Second))
	require.NoError(b, tok.Error())
	c.Disconnect(100)
}

// plainSubscriberRate drains a backlog of n messages with a bare paho QoS 1 subscriber.
func plainSubscriberRate(b *testing.B, broker string, n int, publishBacklog func()) float64 {
	b.Helper()
	primeSession(b, broker, "plain-subscriber")
	publishBacklog()
	var got atomic.Int64
	done := make(chan struct{})
	o := mqtt.NewClientOptions().AddBroker(broker).SetClientID("plain-subscriber").SetCleanSession(false).
		SetOrderMatters(false).SetDefaultPublishHandler(func(mqtt.Client, mqtt.Message) {
		if got.Add(1) == int64(n) {
			close(done)
		}
	})
	c := mqtt.NewClient(o)
	start := time.Now()
	tok := c.Connect()
	require.True(b, tok.WaitTimeout(10*time.Second))
	require.NoError(b, tok.Error())
	defer c.Disconnect(0)
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("plain subscriber got %d of %d", got.Load(), n)
	}
	return float64(n) / time.Since(start).Seconds()
}
