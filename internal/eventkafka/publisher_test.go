package eventkafka_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	kgosasl "github.com/twmb/franz-go/pkg/sasl"
	kgoplain "github.com/twmb/franz-go/pkg/sasl/plain"
	kgoscram "github.com/twmb/franz-go/pkg/sasl/scram"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/heartbeatd/heartbeatd/internal/eventkafka"
	"github.com/heartbeatd/heartbeatd/internal/kafkaclient"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

const (
	eventsTopic     = "heartbeat.events"
	deadLetterTopic = "heartbeat.deadletter"
	partitions      = 8
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startKafka runs an in-process Kafka-protocol cluster with the events and dead-letter topics.
func startKafka(tb testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	tb.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.SeedTopics(partitions, eventsTopic, deadLetterTopic)}, opts...)...)
	require.NoError(tb, err)
	tb.Cleanup(c.Close)
	return c
}

func newPublisher(tb testing.TB, opts eventkafka.PublisherOptions) *eventkafka.Publisher {
	tb.Helper()
	if opts.Topic == "" {
		opts.Topic = eventsTopic
	}
	if opts.DeadLetterTopic == "" {
		opts.DeadLetterTopic = deadLetterTopic
	}
	if opts.Logger == nil {
		if t, ok := tb.(*testing.T); ok {
			opts.Logger = zaptest.NewLogger(t)
		}
	}
	p, err := eventkafka.NewPublisher(opts)
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, p.Close()) })
	return p
}

// readAll consumes topic from the start with franz-go (an independent client) until it holds want records.
func readAll(tb testing.TB, addrs []string, topic string, want int, opts ...kgo.Opt) []*kgo.Record {
	tb.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(addrs...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, opts...)...)
	require.NoError(tb, err)
	defer cl.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) < want {
		fetches := cl.PollFetches(ctx)
		require.NoError(tb, ctx.Err(), "got %d of %d records from %s", len(recs), want, topic)
		fetches.EachError(func(_ string, _ int32, err error) { tb.Fatalf("fetch %s: %v", topic, err) })
		recs = append(recs, fetches.Records()...)
	}
	return recs
}

func makeEvents(n, devices int, at time.Time) []event.Event {
	events := make([]event.Event, n)
	for i := range events {
		dev := "dev-" + strconv.Itoa(i%devices)
		deadline := at.Add(-time.Duration(i) * time.Millisecond)
		events[i] = event.New(event.Alarm, dev, "gateway", deadline, deadline.Add(-30*time.Second), at, i/devices+1)
	}
	return events
}

func requireAllNil(tb testing.TB, errs []error) {
	tb.Helper()
	for i, err := range errs {
		require.NoError(tb, err, "event %d", i)
	}
}

func TestPublishRoundTrip(t *testing.T) {
	c := startKafka(t, kfake.SeedTopics(partitions, "kgo.compare"))
	p := newPublisher(t, eventkafka.PublisherOptions{Brokers: c.ListenAddrs()})
	require.NoError(t, p.Ready(context.Background()))

	const n, devices = 500, 50
	events := makeEvents(n, devices, time.Now())
	errs := p.Publish(context.Background(), events)
	require.Len(t, errs, n)
	requireAllNil(t, errs)

	recs := readAll(t, c.ListenAddrs(), eventsTopic, n)
	require.Len(t, recs, n)
	partitionOf := map[string]int32{}
	byDevice := map[string][]event.Event{}
	for _, r := range recs {
		e, err := event.Decode(r.Value)
		require.NoError(t, err)
		require.Equal(t, e.DeviceID, string(r.Key), "key is the device id")
		if prev, ok := partitionOf[e.DeviceID]; ok {
			require.Equal(t, prev, r.Partition, "device %s on two partitions", e.DeviceID)
		}
		partitionOf[e.DeviceID] = r.Partition
		byDevice[e.DeviceID] = append(byDevice[e.DeviceID], e)
	}
	require.Len(t, partitionOf, devices)
	require.Greater(t, len(uniq(partitionOf)), 1, "devices spread over partitions")

	// Per-device order is the order of the Publish call.
	for i, e := range events {
		got := byDevice[e.DeviceID][i/devices]
		require.Equal(t, e, got)
	}

	// A Java-compatible producer (franz-go's murmur2 sticky-key partitioner) picks the same partition for
	// every device, so events of one device stay ordered whichever client wrote them.
	producer, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)), kgo.DefaultProduceTopic("kgo.compare"))
	require.NoError(t, err)
	defer producer.Close()
	for dev, part := range partitionOf {
		r, err := producer.ProduceSync(context.Background(), &kgo.Record{Key: []byte(dev)}).First()
		require.NoError(t, err)
		require.Equal(t, part, r.Partition, "device %s", dev)
	}
}

func uniq(m map[string]int32) map[int32]bool {
	out := map[int32]bool{}
	for _, v := range m {
		out[v] = true
	}
	return out
}

func TestPublishEmptyAndInvalid(t *testing.T) {
	c := startKafka(t)
	p := newPublisher(t, eventkafka.PublisherOptions{Brokers: c.ListenAddrs()})
	require.Empty(t, p.Publish(context.Background(), nil))

	good := event.New(event.Interrupted, "dev-1", "", time.UnixMilli(1000), time.UnixMilli(0), time.UnixMilli(1001), 0)
	errs := p.Publish(context.Background(), []event.Event{{}, good})
	require.Error(t, errs[0], "an event without device id is refused")
	require.NoError(t, errs[1], "and does not hold up the rest")
	recs := readAll(t, c.ListenAddrs(), eventsTopic, 1)
	require.Equal(t, "dev-1", string(recs[0].Key))
}

func TestPublishBrokerDownThenBack(t *testing.T) {
	c := startKafka(t, kfake.NumBrokers(1))
	addrs := c.ListenAddrs()
	_, port, err := net.SplitHostPort(addrs[0])
	require.NoError(t, err)
	p := newPublisher(t, eventkafka.PublisherOptions{Brokers: addrs, WriteTimeout: time.Second})
	events := makeEvents(20, 5, time.Now())
	requireAllNil(t, p.Publish(context.Background(), events))

	c.Close()
	errs := p.Publish(context.Background(), events)
	require.Len(t, errs, len(events))
	for i, err := range errs {
		require.Error(t, err, "event %d reported delivered with the broker down", i)
		require.ErrorContains(t, err, "event: publish to "+eventsTopic)
	}
	require.Error(t, p.Ready(context.Background()))

	portNum, err := strconv.Atoi(port)
	require.NoError(t, err)
	c2 := startKafka(t, kfake.Ports(portNum))
	require.Eventually(t, func() bool { return p.Ready(context.Background()) == nil }, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		for _, err := range p.Publish(context.Background(), events) {
			if err != nil {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond)
	// The restarted cluster is empty, so everything on it came after the restart.
	require.GreaterOrEqual(t, len(readAll(t, c2.ListenAddrs(), eventsTopic, len(events))), len(events))
}

func TestPublishUnknownTopic(t *testing.T) {
	c := startKafka(t)
	p := newPublisher(t, eventkafka.PublisherOptions{Brokers: c.ListenAddrs(), Topic: "no.such.topic", WriteTimeout: time.Second})
	require.ErrorContains(t, p.Ready(context.Background()), "no.such.topic")
	for _, err := range p.Publish(context.Background(), makeEvents(3, 3, time.Now())) {
		require.Error(t, err)
	}

	p2 := newPublisher(t, eventkafka.PublisherOptions{Brokers: c.ListenAddrs(), DeadLetterTopic: "no.such.dlq"})
	require.ErrorContains(t, p2.Ready(context.Background()), "no.such.dlq", "a missing dead-letter topic is not ready either")
}

func TestPublishAfterClose(t *testing.T) {
	c := startKafka(t)
	p, err := eventkafka.NewPublisher(eventkafka.PublisherOptions{Brokers: c.ListenAddrs(), Topic: eventsTopic})
	require.NoError(t, err)
	require.NoError(t, p.Close())
	for _, err := range p.Publish(context.Background(), makeEvents(2, 2, time.Now())) {
		require.Error(t, err)
	}
}

func TestNewPublisherValidates(t *testing.T) {
	_, err := eventkafka.NewPublisher(eventkafka.PublisherOptions{Topic: "t"})
	require.ErrorContains(t, err, "broker")
	_, err = eventkafka.NewPublisher(eventkafka.PublisherOptions{Brokers: []string{"127.0.0.1:1"}})
	require.ErrorContains(t, err, "topic")
}

func TestDeadLetterRoundTrip(t *testing.T) {
	c := startKafka(t)
	p := newPublisher(t, eventkafka.PublisherOptions{Brokers: c.ListenAddrs()})
	at := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)

	withKey := event.NewDeadLetter("bad_json", event.SourceKafka, "device-signals", []byte("{not json"), at)
	withKey.Key = []byte("dev-9")
	noKey := event.NewDeadLetter("no_device_id", event.SourceMQTT, "devices//heartbeat", []byte{0, 1, 2}, at)
	require.NoError(t, p.PublishDeadLetter(context.Background(), withKey))
	requireAllNil(t, p.PublishDeadLetters(context.Background(), []event.DeadLetter{noKey}))

	recs := readAll(t, c.ListenAddrs(), deadLetterTopic, 2)
	got := map[string]event.DeadLetter{}
	for _, r := range recs {
		d, err := event.DecodeDeadLetter(r.Value)
		require.NoError(t, err)
		require.Equal(t, string(d.Key), string(r.Key), "message key is the input's key")
		got[d.Reason] = d
	}
	require.Equal(t, withKey, got["bad_json"])
	require.Equal(t, noKey, got["no_device_id"])
}

func TestDeadLetterTopicUnset(t *testing.T) {
	p, err := eventkafka.NewPublisher(eventkafka.PublisherOptions{Brokers: []string{"127.0.0.1:1"}, Topic: eventsTopic})
	require.NoError(t, err)
	defer p.Close()
	require.ErrorContains(t, p.PublishDeadLetter(context.Background(), event.DeadLetter{}), "no dead-letter topic")
}

// Managed Kafka needs TLS and SASL together; every mechanism of docs/configuration.md against a broker that demands both.
func TestPublishTLSAndSASL(t *testing.T) {
	certs := testenv.GenerateTLS(t)
	serverTLS, clientTLS := certs.ServerConfig(t), certs.ClientConfig(t)
	clientTLS.Certificates = nil // the server's certificate is checked; the client authenticates with SASL
	const user, pass = "heart,beat=d", "s3cret ü,="
	for _, mech := range []struct {
		config, kafka string
		kgo           kgosasl.Mechanism
	}{
		{"scram-sha-256", "SCRAM-SHA-256", kgoscram.Auth{User: user, Pass: pass}.AsSha256Mechanism()},
		{"scram-sha-512", "SCRAM-SHA-512", kgoscram.Auth{User: user, Pass: pass}.AsSha512Mechanism()},
		{"plain", "PLAIN", kgoplain.Auth{User: user, Pass: pass}.AsMechanism()},
	} {
		t.Run(mech.config, func(t *testing.T) {
			c := startKafka(t, kfake.TLS(serverTLS), kfake.EnableSASL(), kfake.Superuser(mech.kafka, user, pass))
			m, err := kafkaclient.SASLMechanism(mech.config, user, pass)
			require.NoError(t, err)
			p := newPublisher(t, eventkafka.PublisherOptions{Brokers: c.ListenAddrs(), TLS: clientTLS.Clone(), SASL: m})
			require.NoError(t, p.Ready(context.Background()))
			events := makeEvents(10, 10, time.Now())
			requireAllNil(t, p.Publish(context.Background(), events))
			recs := readAll(t, c.ListenAddrs(), eventsTopic, len(events), kgo.DialTLSConfig(clientTLS.Clone()), kgo.SASL(mech.kgo))
			require.Len(t, recs, len(events))

			bad, err := kafkaclient.SASLMechanism(mech.config, user, "wrong")
			require.NoError(t, err)
			pBad := newPublisher(t, eventkafka.PublisherOptions{Brokers: c.ListenAddrs(), TLS: clientTLS.Clone(), SASL: bad, WriteTimeout: time.Second})
			require.Error(t, pBad.Ready(context.Background()), "a wrong password is not ready")

			noTLS := newPublisher(t, eventkafka.PublisherOptions{Brokers: c.ListenAddrs(), SASL: m, WriteTimeout: time.Second})
			require.Error(t, noTLS.Ready(context.Background()), "plaintext against a TLS listener is not ready")
		})
	}
}
