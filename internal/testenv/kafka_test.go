package testenv_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// kafka-go, which heartbeatd uses, works against kfake: a Writer with acks=all, and a group Reader (whose
// ConsumerGroup heartbeatd's Kafka source joins with).
func TestKafkaWithKafkaGo(t *testing.T) {
	const topic, n = "device-signals", 10
	k := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{topic}})
	require.Len(t, k.Addrs, 1)
	// An own transport, closed at the end: the default one keeps connections (and goroutines) forever.
	transport := &kafka.Transport{}
	defer transport.CloseIdleConnections()
	w := &kafka.Writer{
		Addr:         kafka.TCP(k.Addrs...),
		Transport:    transport,
		Topic:        topic,
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond,
	}
	defer w.Close()
	var msgs []kafka.Message
	for i := range n {
		msgs = append(msgs, kafka.Message{Key: []byte("dev-" + strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, w.WriteMessages(ctx, msgs...))

	recs := k.ReadAll(t, topic, n, 10*time.Second)
	require.Len(t, recs, n)
	partitions := map[int32]bool{}
	keys := map[string]string{}
	for _, r := range recs {
		partitions[r.Partition] = true
		keys[string(r.Key)] = string(r.Value)
	}
	require.Len(t, keys, n)
	require.Equal(t, "7", keys["dev-7"])
	require.Greater(t, len(partitions), 1, "default 3 partitions, keys spread over them")

	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:           k.Addrs,
		GroupID:           "testenv",
		Topic:             topic,
		MaxWait:           100 * time.Millisecond,
		HeartbeatInterval: 500 * time.Millisecond,
	})
	defer r.Close()
	read := map[string]string{}
	for len(read) < n {
		m, err := r.FetchMessage(ctx)
		require.NoError(t, err, "group reader got %d of %d", len(read), n)
		read[string(m.Key)] = string(m.Value)
		require.NoError(t, r.CommitMessages(ctx, m))
	}
	require.Equal(t, keys, read)
}

func TestKafkaRestart(t *testing.T) {
	const topic = "events"
	for _, persist := range []bool{false, true} {
		t.Run("persist="+strconv.FormatBool(persist), func(t *testing.T) {
			k := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{topic}, Partitions: 1, Persist: persist})
			addrs := k.Addrs
			produce(t, k, topic, 5)
			require.Len(t, k.ReadAll(t, topic, 5, 10*time.Second), 5)

			k.Stop()
			require.Nil(t, k.Cluster())
			_, err := net.DialTimeout("tcp", addrs[0], time.Second)
			require.Error(t, err, "a stopped cluster is unreachable")
			k.Stop() // twice is harmless

			k.Start(t)
			require.Equal(t, addrs, k.Addrs)
			produce(t, k, topic, 3)
			want := 3
			if persist {
				want = 8
			}
			recs := k.ReadAll(t, topic, want, 10*time.Second)
			require.Len(t, recs, want)
			require.EqualValues(t, want-1, recs[len(recs)-1].Offset)
		})
	}
}

// produce writes n records with franz-go, failing the test on any error.
func produce(t *testing.T, k *testenv.Kafka, topic string, n int) {
	t.Helper()
	cl := k.Client(t, kgo.DefaultProduceTopic(topic), kgo.RecordRetries(20))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Key: []byte("k" + strconv.Itoa(i)), Value: []byte("v")})
	}
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
	cl.Close()
}

func TestKafkaTLSAndSASL(t *testing.T) {
	files := testenv.GenerateTLS(t)
	const topic = "signals"
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			user := testenv.SASLUser{Mechanism: mech, User: "hb", Pass: "s3cret"}
			k := testenv.StartKafka(t, testenv.KafkaOptions{
				Topics:    []string{topic},
				TLS:       files.ServerConfig(t),
				ClientTLS: files.ClientConfig(t),
				SASL:      []testenv.SASLUser{user},
			})
			produce(t, k, topic, 4)
			require.Len(t, k.ReadAll(t, topic, 4, 10*time.Second), 4)

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, k.Client(t).Ping(ctx), "right password accepted")
			wrong := user
			wrong.Pass = "wrong"
			bad, err := kgo.NewClient(kgo.SeedBrokers(k.Addrs...), kgo.DialTLSConfig(files.ClientConfig(t)),
				kgo.SASL(testenv.SASLMechanism(wrong)))
			require.NoError(t, err)
			defer bad.Close()
			require.Error(t, bad.Ping(ctx), "wrong password refused")

			noSASL, err := kgo.NewClient(kgo.SeedBrokers(k.Addrs...), kgo.DialTLSConfig(files.ClientConfig(t)))
			require.NoError(t, err)
			defer noSASL.Close()
			require.Error(t, noSASL.Ping(ctx), "no SASL refused")
		})
	}
}
