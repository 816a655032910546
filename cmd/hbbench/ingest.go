package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/segmentio/kafka-go"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// The ingest scenario follows internal/ingest/bench_test.go (BenchmarkIngestKafka, BenchmarkIngestMQTT): a
// backlog of -signals messages on the broker, drained through the real source and chain into Redis, read
// beside the plain refresh rate on the same Redis and devices.

const (
	signalTopic   = "device-signals"
	signalPayload = `{"type":"gateway","ts":%d}`
)

// countingRefresher passes refreshes on and counts the signals Redis acknowledged.
type countingRefresher struct {
	next  ingest.Refresher
	want  int64
	n     atomic.Int64
	first atomic.Int64 // UnixNano of the first acknowledged refresh
	done  chan struct{}
	once  sync.Once
}

func newCounting(next ingest.Refresher, want int) *countingRefresher {
	return &countingRefresher{next: next, want: int64(want), done: make(chan struct{})}
}

func (c *countingRefresher) Refresh(ctx context.Context, sigs []deadline.Signal) error {
	if err := c.next.Refresh(ctx, sigs); err != nil {
		return err
	}
	c.first.CompareAndSwap(0, time.Now().UnixNano())
	if c.n.Add(int64(len(sigs))) >= c.want {
		c.once.Do(func() { close(c.done) })
	}
	return nil
}

// wait blocks until want signals were applied; it returns when that was and the first refresh's time.
func (c *countingRefresher) wait(ctx context.Context, timeout time.Duration) (first, last time.Time, err error) {
	select {
	case <-c.done:
		return time.Unix(0, c.first.Load()), time.Now(), nil
	case <-time.After(timeout):
		return time.Time{}, time.Time{}, fmt.Errorf("hbbench: applied %d of %d signals after %s", c.n.Load(), c.want, timeout)
	case <-ctx.Done():
		return time.Time{}, time.Time{}, ctx.Err()
	}
}

func ingestDevices(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "ingest-" + strconv.Itoa(i)
	}
	return ids
}

// plainRefreshRate is deadline.Store.Refresh alone on the same Redis and devices: batches of 256 signals,
// one at a time, as BenchmarkRefresh in internal/deadline does. The ingest rates are read against it.
func plainRefreshRate(ctx context.Context, store *deadline.Store, ids []string) (float64, error) {
	start := time.Now()
	err := benchrig.RefreshBatches(ctx, store, 256, len(ids), func(i int) deadline.Signal {
		return deadline.Signal{Device: ids[i], Type: "gateway", Seen: time.Now()}
	})
	return float64(len(ids)) / time.Since(start).Seconds(), err
}

// runChain runs a chain on refresher until the returned stop is called.
func runChain(refresher ingest.Refresher) (*ingest.Chain, func(), error) {
	known := func(name string) bool { return contains(benchTypes, name) }
	chain, err := ingest.NewChain(refresher, nil, ingest.ChainOptions{KnownType: known})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = chain.Run(ctx) }()
	return chain, func() { cancel(); <-done }, nil
}

// drain runs src into a fresh chain over counting and reports signals/s from the source's start (with
// connecting, joining the group, receiving the session) and from the first applied refresh.
func drain(ctx context.Context, src ingest.Source, store *deadline.Store, n int) (total, steady float64, err error) {
	cnt := newCounting(store, n)
	chain, stopChain, err := runChain(cnt)
	if err != nil {
		return 0, 0, err
	}
	defer stopChain()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- src.Run(runCtx, chain) }()
	first, last, err := cnt.wait(ctx, 5*time.Minute)
	cancel()
	if runErr := <-done; runErr != nil && !errors.Is(runErr, context.Canceled) {
		err = errors.Join(err, runErr)
	}
	if err != nil {
		return 0, 0, err
	}
	return float64(n) / last.Sub(start).Seconds(), float64(n) / last.Sub(first).Seconds(), nil
}

func ingestScenario(e *env) error {
	n := e.opts.Signals
	store, err := newStore(e, config.DefaultSlots, nil)
	if err != nil {
		return err
	}
	ids := ingestDevices(n)
	refresh, err := plainRefreshRate(e.ctx, store, ids)
	if err != nil {
		return err
	}
	e.add("ingest", "deadline.Refresh 256/call", refresh, "signals/s", "baseline, same run")
	return errors.Join(ingestKafka(e, store, ids, refresh), ingestMQTT(e, store, ids, refresh))
}

func ingestKafka(e *env, store *deadline.Store, ids []string, refresh float64) error {
	total, steady, err := kafkaDrain(e.ctx, store, ids)
	if err != nil {
		return err
	}
	note := fmt.Sprintf("%d signals, kfake 4 partitions", len(ids))
	e.add("ingest", "kafka → redis (from start)", total, "signals/s", fmt.Sprintf("%.2fx refresh; %s", total/refresh, note))
	e.add("ingest", "kafka → redis (from 1st write)", steady, "signals/s", fmt.Sprintf("%.2fx refresh; goal ≥ 0.5x", steady/refresh))
	return nil
}

// kafkaDrain writes a signal of each device to a fresh kfake (4 partitions) and drains it through the
// Kafka source and a chain into store: signals/s from the source's start and from the first write.
func kafkaDrain(ctx context.Context, store *deadline.Store, ids []string) (total, steady float64, err error) {
	k, err := benchrig.Kafka(4, signalTopic)
	if err != nil {
		return 0, 0, err
	}
	defer k.Close()
	if err := writeSignals(ctx, k.Addrs, len(ids), func(i int) string { return ids[i] }); err != nil {
		return 0, 0, err
	}
	src, err := ingest.NewKafkaSource(ingest.KafkaOptions{Brokers: k.Addrs, Topics: []string{signalTopic}, GroupID: "hbbench"})
	if err != nil {
		return 0, 0, err
	}
	total, steady, err = drain(ctx, src, store, len(ids))
	if err != nil {
		return 0, 0, fmt.Errorf("hbbench: kafka ingest: %w", err)
	}
	return total, steady, nil
}

var mqttSubscriptions = []ingest.Subscription{{Topic: "devices/{device_id}/heartbeat"}}

func ingestMQTT(e *env, store *deadline.Store, ids []string, refresh float64) error {
	// The default queue limit (1000 per client) would silently drop most of a QoS 1 backlog.
	broker, err := testenv.LaunchMosquitto(e.ctx, "", testenv.MosquittoOptions{MaxQueued: 10_000_000})
	if err != nil {
		return err
	}
	defer broker.Close()
	e.versions["mosquitto"] = mosquittoVersion()
	pub, err := testenv.ConnectMQTT(broker.Addr, mqtt.NewClientOptions().SetClientID("hbbench-publisher"))
	if err != nil {
		return err
	}
	defer pub.Disconnect(0)
	ts := time.Now().UnixMilli()
	// QoS 1 publishes in flight are bounded by MQTT's 16-bit packet ids (paho: "no message IDs
	// available"), so the backlog goes out in windows that each wait for their PUBACKs.
	const window = 16_384
	publishBacklog := func() error {
		toks := make([]mqtt.Token, 0, window)
		for i, id := range ids {
			toks = append(toks, pub.Publish("devices/"+id+"/heartbeat", 1, false, fmt.Appendf(nil, signalPayload, ts)))
			if len(toks) < window && i < len(ids)-1 {
				continue
			}
			for _, t := range toks {
				if !t.WaitTimeout(time.Minute) {
					return errors.New("hbbench: mqtt publish not acknowledged within a minute")
				}
				if err := t.Error(); err != nil {
					return fmt.Errorf("hbbench: mqtt publish: %w", err)
				}
			}
			toks = toks[:0]
		}
		return nil
	}

	// Baseline: a bare paho QoS 1 subscriber (auto-ack, no work) drains the same backlog.
	if err := primeSession(broker.Addr, "plain-subscriber"); err != nil {
		return err
	}
	if err := publishBacklog(); err != nil {
		return err
	}
	var got atomic.Int64
	plainDone := make(chan struct{})
	start := time.Now()
	plain, err := testenv.ConnectMQTT(broker.Addr, mqtt.NewClientOptions().SetClientID("plain-subscriber").SetCleanSession(false).
		SetOrderMatters(false).SetDefaultPublishHandler(func(mqtt.Client, mqtt.Message) {
		if got.Add(1) == int64(len(ids)) {
			close(plainDone)
		}
	}))
	if err != nil {
		return err
	}
	select {
	case <-plainDone:
	case <-time.After(5 * time.Minute):
	case <-e.ctx.Done():
	}
	plainRate := float64(len(ids)) / time.Since(start).Seconds()
	plain.Disconnect(0)
	if got.Load() < int64(len(ids)) {
		return errors.Join(fmt.Errorf("hbbench: plain subscriber got %d of %d", got.Load(), len(ids)), e.ctx.Err())
	}
	e.add("ingest", "mqtt plain QoS 1 subscriber", plainRate, "msgs/s", "baseline, same run and broker")

	if err := primeSession(broker.Addr, "heartbeatd-hbbench"); err != nil {
		return err
	}
	if err := publishBacklog(); err != nil {
		return err
	}
	src, err := ingest.NewMQTTSource(ingest.MQTTOptions{Brokers: []string{broker.Addr}, ClientID: "heartbeatd-hbbench", QoS: 1, Subscriptions: mqttSubscriptions})
	if err != nil {
		return err
	}
	total, _, err := drain(e.ctx, src, store, len(ids))
	if err != nil {
		return fmt.Errorf("hbbench: mqtt ingest: %w", err)
	}
	e.add("ingest", "mqtt → redis", total, "signals/s", fmt.Sprintf("%.2fx plain subscriber, %.2fx refresh; %d signals from a session backlog", total/plainRate, total/refresh, len(ids)))
	return nil
}

// primeSession connects clientID with a persistent session subscribed to the signal topic, then leaves,
// so the broker queues what is published next.
func primeSession(broker, clientID string) error {
	c, err := testenv.ConnectMQTT(broker, mqtt.NewClientOptions().SetClientID(clientID).SetCleanSession(false))
	if err != nil {
		return err
	}
	defer c.Disconnect(100)
	tok := c.Subscribe("devices/+/heartbeat", 1, nil)
	if !tok.WaitTimeout(10 * time.Second) {
		return errors.New("hbbench: mqtt subscribe timed out")
	}
	return tok.Error()
}

// mosquittoVersion is the first line of `mosquitto -h`, which exits non-zero after printing it.
func mosquittoVersion() string {
	path, err := testenv.LookPath("mosquitto")
	if err != nil {
		return ""
	}
	out, _ := exec.Command(path, "-h").Output()
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}

// writeSignals writes a signal for devices id(0) … id(n-1) to the signal topic, 10000 per write.
func writeSignals(ctx context.Context, brokers []string, n int, id func(i int) string) error {
	return writeSignalsAs(ctx, brokers, n, id, func(int) []byte { return fmt.Appendf(nil, signalPayload, time.Now().UnixMilli()) }, 0)
}

// writeSignalsAs is writeSignals with payload(i) as device i's signal, at about rate signals a second
// (0: as fast as the broker takes them).
func writeSignalsAs(ctx context.Context, brokers []string, n int, id func(i int) string, payload func(i int) []byte, rate int) error {
	start := time.Now()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: signalTopic, Balancer: &kafka.Hash{}, BatchTimeout: time.Millisecond,
		BatchSize: 5000, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	msgs := make([]kafka.Message, 0, 10_000)
	for i := 0; i < n; {
		size := 10_000
		if rate > 0 {
			if !loop.Sleep(ctx, time.Until(start.Add(time.Duration(i)*time.Second/time.Duration(rate)))) {
				return ctx.Err()
			}
			size = pacedWrite(rate, int(time.Since(start).Seconds()*float64(rate))-i)
		}
		msgs = msgs[:0]
		for j := i; j < min(i+size, n); j++ {
			// The record's timestamp is when the message was made, not when its batch goes out.
			msgs = append(msgs, kafka.Message{Key: []byte(id(j)), Value: payload(j), Time: time.Now()})
		}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			return fmt.Errorf("hbbench: write signals: %w", err)
		}
		i += len(msgs)
	}
	return nil
}

// pacedWrite is how many signals a write at rate carries when due are due by now: a millisecond's worth
// (a steady stream), or all that are due when a write's round trip is longer, so the pace holds.
func pacedWrite(rate, due int) int {
	return min(max(rate/1000, 1, due), 10_000)
}
