package ingest_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heartbeatd/heartbeatd/internal/eventkafka"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/kafkaclient"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// committedOffsets reads the group's committed offset per partition of the signal topic.
func committedOffsets(tb testing.TB, addrs []string, partitions int) map[int]int64 {
	tb.Helper()
	ps := make([]int, partitions)
	for i := range ps {
		ps[i] = i
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := (&kafka.Client{Addr: kafka.TCP(addrs...)}).OffsetFetch(ctx, &kafka.OffsetFetchRequest{
		GroupID: "heartbeatd", Topics: map[string][]int{signalTopic: ps},
	})
	require.NoError(tb, err)
	out := map[int]int64{}
	for _, p := range res.Topics[signalTopic] {
		require.NoError(tb, p.Error)
		out[p.Partition] = p.CommittedOffset
	}
	return out
}

// TestKafkaNeverCommitsPastUnappliedMessages checks, all through a Redis outage, that every message below
// a committed offset had its deadline write acknowledged, and that in the end everything is committed.
func TestKafkaNeverCommitsPastUnappliedMessages(t *testing.T) {
	const partitions = 3
	tr, k := newKafkaTransport(t, partitions)
	srv := testenv.StartRedis(t, testenv.RedisOptions{AOF: true})
	p := startPipeline(t, policyStore(t, srv.Client(t)), ingest.ChainOptions{Batch: 32})
	p.run(t, tr.source(t, "a"))

	ids := devices("commit", 900)
	var snapshots []map[int]int64 // committed offsets, each taken before the applied set it is checked against
	var appliedAt []map[string]bool
	snapshot := func() {
		c := committedOffsets(t, k.Addrs, partitions)
		p.rec.mu.Lock()
		applied := make(map[string]bool, len(p.rec.applied))
		for d := range p.rec.applied {
			applied[d] = true
		}
		p.rec.mu.Unlock()
		snapshots, appliedAt = append(snapshots, c), append(appliedAt, applied)
	}

	tr.send(t, rawFor(ids[:300], "")...)
	p.waitApplied(t, ids[:300]...)
	srv.Kill(t)
	tr.send(t, rawFor(ids[300:600], "")...)
	require.Eventually(t, func() bool { return counter(t, p.reg, "heartbeatd_refresh_errors_total", nil) >= 3 }, 20*time.Second, 5*time.Millisecond)
	for range 5 {
		snapshot()
	}
	srv.Start(t)
	tr.send(t, rawFor(ids[600:], "")...)
	p.waitApplied(t, ids...)
	require.Eventually(t, func() bool {
		var sum int64
		for _, off := range committedOffsets(t, k.Addrs, partitions) {
			sum += off
		}
		return sum == int64(len(ids))
	}, 20*time.Second, 10*time.Millisecond, "everything applied is committed in the end")
	snapshot()

	records := k.ReadAll(t, signalTopic, len(ids), 20*time.Second)
	for i, committed := range snapshots {
		for _, r := range records {
			if r.Offset < committed[int(r.Partition)] {
				require.True(t, appliedAt[i][string(r.Key)], "snapshot %d: partition %d offset %d (%s) committed before it was applied",
					i, r.Partition, r.Offset, r.Key)
			}
		}
	}
}

// TestKafkaRebalance moves partitions between two replicas while signals flow; none is lost.
func TestKafkaRebalance(t *testing.T) {
	testenv.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		const partitions = 4
		tr, k := newKafkaTransport(t, partitions)
		store := policyStore(t, rdb)
		a, b := startPipeline(t, store, ingest.ChainOptions{}), startPipeline(t, store, ingest.ChainOptions{})
		ids := devices("rebalance", 1500)

		srcA := tr.source(t, "a")
		a.run(t, srcA)
		tr.send(t, rawFor(ids[:500], "")...)
		a.waitApplied(t, ids[:500]...)

		// b is connected before the group has rebalanced; until then a fetches everything. Keep signals
		// flowing, a few at a time, until b applies some: it took partitions.
		b.run(t, tr.source(t, "b"))
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for next := 500; next < 1000; next += 10 {
			tr.send(t, rawFor(ids[next:next+10], "")...)
			if b.rec.count() > 0 {
				tr.send(t, rawFor(ids[next+10:1000], "")...)
				break
			}
			<-tick.C
		}
		require.Positive(t, b.rec.count(), "the second replica took partitions while signals flowed")

		require.NoError(t, a.stop(srcA))
		tr.send(t, rawFor(ids[1000:], "")...)
		require.Eventually(t, func() bool {
			for _, id := range ids {
				if !a.rec.has(id) && !b.rec.has(id) {
					return false
				}
			}
			return true
		}, 30*time.Second, 10*time.Millisecond, "every signal applied by one replica or the other")
		require.Eventually(t, func() bool {
			var sum int64
			for _, off := range committedOffsets(t, k.Addrs, partitions) {
				sum += off
			}
			return sum == int64(len(ids))
		}, 30*time.Second, 10*time.Millisecond)
	})
}

func TestKafkaTLSAndSASL(t *testing.T) {
	files := testenv.GenerateTLS(t)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(files.CAPEM))
	clientTLS := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	users := []testenv.SASLUser{
		{Mechanism: "PLAIN", User: "plain-user", Pass: "plain-pass"},
		{Mechanism: "SCRAM-SHA-256", User: "scram256", Pass: "pässwörd-256"},
		{Mechanism: "SCRAM-SHA-512", User: "scram512", Pass: "pass-512"},
	}
	k := testenv.StartKafka(t, testenv.KafkaOptions{
		Topics: []string{signalTopic}, Partitions: 1,
		TLS: files.ServerConfig(t), ClientTLS: files.ClientConfig(t),
		SASL: users,
	})
	admin, err := kafkaclient.SASLMechanism(users[0].Mechanism, users[0].User, users[0].Pass)
	require.NoError(t, err)
	w := kafkaWriter(k.Addrs, clientTLS, admin)
	t.Cleanup(func() { _ = w.Close() })

	for _, u := range users {
		t.Run(u.Mechanism, func(t *testing.T) {
			mech, err := kafkaclient.SASLMechanism(u.Mechanism, u.User, u.Pass)
			require.NoError(t, err)
			p := startPipeline(t, policyStore(t, testenv.StartRedis(t).Client(t)), ingest.ChainOptions{})
			src := kafkaSource(t, k.Addrs, clientTLS, mech)
			p.run(t, src)
			id := "tls-" + strings.ToLower(u.Mechanism)
			require.NoError(t, w.WriteMessages(t.Context(), kafka.Message{Key: []byte(id)}))
			p.waitApplied(t, id)
			require.NoError(t, p.stop(src))
		})
	}

	wrongPass, err := kafkaclient.SASLMechanism("scram-sha-256", "scram256", "wrong")
	require.NoError(t, err)
	for name, src := range map[string]*ingest.KafkaSource{
		"wrong password":   kafkaSource(t, k.Addrs, clientTLS, wrongPass),
		"untrusted broker": kafkaSource(t, k.Addrs, &tls.Config{MinVersion: tls.VersionTLS12}, wrongPass),
	} {
		t.Run(name, func(t *testing.T) {
			p := startPipeline(t, policyStore(t, testenv.StartRedis(t).Client(t)), ingest.ChainOptions{})
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			err := src.Run(ctx, p.chain)
			require.Error(t, err, "a configuration error is returned, not retried forever")
			require.Contains(t, err.Error(), k.Addrs[0], "the error names the broker")
			require.False(t, src.Health().Connected)
		})
	}
}

// startDeadLetterPipeline runs a Kafka source and a chain whose dead letters go through the real event
// publisher to heartbeat.deadletter on a kfake cluster of its own.
func startDeadLetterPipeline(t *testing.T) (*testenv.Kafka, *recorder) {
	t.Helper()
	k := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{signalTopic, "heartbeat.events", "heartbeat.deadletter"}, Partitions: 1})
	pub, err := eventkafka.NewPublisher(eventkafka.PublisherOptions{Brokers: k.Addrs, Topic: "heartbeat.events", DeadLetterTopic: "heartbeat.deadletter"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })

	store := policyStore(t, testenv.StartRedis(t).Client(t))
	rec := newRecorder(store)
	chain, err := ingest.NewChain(rec, pub, ingest.ChainOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = chain.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	src := kafkaSource(t, k.Addrs, nil, nil)
	sctx, scancel := context.WithCancel(context.Background())
	sdone := make(chan struct{})
	go func() { defer close(sdone); _ = src.Run(sctx, chain) }()
	t.Cleanup(func() { scancel(); <-sdone })
	return k, rec
}

// TestKafkaDeadLettersThroughPublisher sends bad input through the real event publisher to the
// dead-letter topic.
func TestKafkaDeadLettersThroughPublisher(t *testing.T) {
	k, rec := startDeadLetterPipeline(t)
	w := kafkaWriter(k.Addrs, nil, nil)
	t.Cleanup(func() { _ = w.Close() })
	require.NoError(t, w.WriteMessages(t.Context(),
		kafka.Message{Key: []byte("dev-1"), Value: []byte(`{"ts":"soon"}`)},
		kafka.Message{Key: []byte("dev-2"), Value: []byte(`{}`)},
	))
	require.Eventually(t, func() bool { return rec.has("dev-2") }, 20*time.Second, 5*time.Millisecond)
	recs := k.ReadAll(t, "heartbeat.deadletter", 1, 20*time.Second)
	require.Len(t, recs, 1)
	d, err := event.DecodeDeadLetter(recs[0].Value)
	require.NoError(t, err)
	require.Equal(t, ingest.ReasonBadTS, d.Reason)
	require.Equal(t, "kafka", d.Source)
	require.Equal(t, signalTopic, d.Topic)
	require.Equal(t, []byte(`{"ts":"soon"}`), d.Payload)
	require.Equal(t, []byte("dev-1"), d.Key)
	require.Equal(t, "dev-1", string(recs[0].Key), "keyed by the input's key")
}

// TestKafkaHugeKeyDoesNotTakeDeadLettersDown: a record with a 1 MB key among valid and other bad
// records. Its dead letter carries the key cut to MaxDeadLetterKey, so it fits in a Kafka message and
// the dead letters written beside it arrive too; every valid signal is applied.
func TestKafkaHugeKeyDoesNotTakeDeadLettersDown(t *testing.T) {
	k, rec := startDeadLetterPipeline(t)
	hugeKey := bytes.Repeat([]byte("k"), 1_000_000) // within the broker's 1 MiB batch limit, as a producer may send it
	bigValue := bytes.Repeat([]byte("v"), 900_000)
	msgs := []kafka.Message{
		{Key: []byte("valid-0")},
		{Key: []byte("bad-ts"), Value: []byte(`{"ts":"soon"}`)},
		{Key: hugeKey},
		{Key: []byte("valid-1"), Value: []byte(`{"type":"gateway"}`)},
		{Key: []byte("bad-json"), Value: []byte(`{"ts":`)},
		{Key: []byte("bad-size"), Value: bigValue},
		{Key: []byte("bad-id"), Value: []byte(`{"device_id":"someone-else"}`)},
		{Key: []byte("valid-2")},
	}
	w := kafkaWriter(k.Addrs, nil, nil) // its 1 MiB batches keep each large record in a batch of its own
	t.Cleanup(func() { _ = w.Close() })
	require.NoError(t, w.WriteMessages(t.Context(), msgs...))

	require.Eventually(t, func() bool { return rec.has("valid-0") && rec.has("valid-1") && rec.has("valid-2") }, 20*time.Second, 5*time.Millisecond)
	recs := k.ReadAll(t, "heartbeat.deadletter", 5, 20*time.Second)
	byReason := map[string]event.DeadLetter{}
	for _, r := range recs {
		d, err := event.DecodeDeadLetter(r.Value)
		require.NoError(t, err)
		byReason[d.Reason] = d
		require.Equal(t, d.Key, r.Key, "keyed by the (cut) input key")
		require.Less(t, len(r.Key)+len(r.Value), 100<<10)
	}
	require.ElementsMatch(t, []string{ingest.ReasonBadTS, ingest.ReasonInvalidDeviceID, ingest.ReasonMalformedJSON,
		ingest.ReasonOversize, ingest.ReasonIDMismatch}, slices.Collect(maps.Keys(byReason)))
	huge := byReason[ingest.ReasonInvalidDeviceID]
	require.True(t, huge.KeyTruncated)
	require.Equal(t, len(hugeKey), huge.KeySize)
	require.Equal(t, hugeKey[:event.MaxDeadLetterKey], huge.Key)
	big := byReason[ingest.ReasonOversize]
	require.True(t, big.PayloadTruncated)
	require.Equal(t, len(bigValue), big.PayloadSize)
	require.Len(t, big.Payload, event.MaxDeadLetterPayload)
	require.Equal(t, []byte("bad-size"), big.Key)
}

// TestKafkaNotConnectedUntilTheGroupAssignsPartitions: a restarted replica's group keeps the partitions
// with its previous process until that session times out, and meanwhile nothing is read. The source must
// report that time as an outage (so hold-back covers it), not as connected — even though every broker
// answers.
func TestKafkaNotConnectedUntilTheGroupAssignsPartitions(t *testing.T) {
	tr, k := newKafkaTransport(t, 2)
	store := policyStore(t, testenv.StartRedis(t).Client(t))
	p := startPipeline(t, store, ingest.ChainOptions{})

	// The coordinator holds the first JoinGroup, as it does while a dead member's session runs out.
	release, held := make(chan struct{}), make(chan struct{})
	var once sync.Once
	k.Cluster().ControlKey(int16(kmsg.JoinGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		once.Do(func() { close(held) })
		k.Cluster().SleepControl(func() { <-release })
		return nil, nil, false // then the cluster answers it as usual
	})
	src := tr.source(t, "restarted")
	p.start(t, src)
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the source never asked to join its group")
	}
	// The brokers answer the source's probes (every 100 ms here) all along; only the join is pending.
	require.Never(t, func() bool { return src.Health().Connected }, time.Second, 20*time.Millisecond,
		"connected while no partition is assigned")

	close(release)
	require.Eventually(t, func() bool { return src.Health().Connected }, 30*time.Second, 20*time.Millisecond,
		"connected once the group assigned partitions")
	tr.send(t, rawFor([]string{"after-join"}, "")...)
	p.waitApplied(t, "after-join")
}

// TestKafkaSignalWithoutTSTakesTheRecordTime: a record without ts is a signal at its record timestamp,
// so the deadline does not move by the consumer's delay (docs/signals.md); one stamped further in the future than
// max_clock_skew counts as received now.
func TestKafkaSignalWithoutTSTakesTheRecordTime(t *testing.T) {
	k := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{signalTopic}})
	srv := testenv.StartRedis(t)
	store := policyStore(t, srv.Client(t))
	p := startPipeline(t, store, ingest.ChainOptions{MaxClockSkew: 5 * time.Second})
	p.run(t, kafkaSource(t, k.Addrs, nil, nil))

	w := kafkaWriter(k.Addrs, nil, nil)
	t.Cleanup(func() { _ = w.Close() })
	stamped := time.Now().Add(-3 * time.Second).Truncate(time.Millisecond)
	future := time.Now().Add(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := time.Now()
	require.NoError(t, w.WriteMessages(ctx,
		kafka.Message{Key: []byte("stamped"), Time: stamped},
		kafka.Message{Key: []byte("from-the-future"), Time: future}))
	p.waitApplied(t, "stamped", "from-the-future")

	require.Equal(t, stamped.Add(timeoutOf("")), p.device(t, "stamped").Deadline, "deadline = record time + timeout")
	got := p.device(t, "from-the-future").Deadline.Add(-timeoutOf(""))
	require.False(t, got.Before(before.Truncate(time.Millisecond)), "a stamp past max_clock_skew counts as received: %s", got)
	require.True(t, got.Before(time.Now().Add(time.Second)), "not the future stamp: %s", got)
}

// TestKafkaGoesOnPastSignalsRetentionDeleted: signals retention deleted before the group read them
// are skipped, the retained ones after them are applied, and the group's offsets move past them all.
func TestKafkaGoesOnPastSignalsRetentionDeleted(t *testing.T) {
	const partitions = 2
	tr, k := newKafkaTransport(t, partitions)
	srv := testenv.StartRedis(t, testenv.RedisOptions{})
	p := startPipeline(t, policyStore(t, srv.Client(t)), ingest.ChainOptions{})
	src := tr.source(t, "a")
	p.run(t, src)
	read := devices("read", 20)
	tr.send(t, rawFor(read, "")...)
	p.waitApplied(t, read...)
	require.NoError(t, p.stop(src))

	deleted, retained := devices("deleted", 20), devices("retained", 20)
	tr.send(t, rawFor(deleted, "")...)
	// Up to each partition's end (-1), as retention deleting old segments would; the leader answers.
	req := kmsg.NewPtrDeleteRecordsRequest()
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = signalTopic
	for i := range partitions {
		rp := kmsg.NewDeleteRecordsRequestTopicPartition()
		rp.Partition, rp.Offset = int32(i), -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, shard := range k.Client(t).RequestSharded(ctx, req) {
		require.NoError(t, shard.Err)
		for _, t2 := range shard.Resp.(*kmsg.DeleteRecordsResponse).Topics {
			for _, p := range t2.Partitions {
				require.Zero(t, p.ErrorCode, "delete records of partition %d", p.Partition)
			}
		}
	}
	tr.send(t, rawFor(retained, "")...)

	p.run(t, tr.source(t, "a"))
	p.waitApplied(t, retained...)
	for _, id := range deleted {
		require.False(t, p.rec.has(id), "%s was deleted before it was read", id)
	}
	require.Eventually(t, func() bool {
		var sum int64
		for _, off := range committedOffsets(t, k.Addrs, partitions) {
			sum += off
		}
		return sum == int64(len(read)+len(deleted)+len(retained))
	}, 20*time.Second, 10*time.Millisecond, "the group's offsets moved past the deleted signals")
}
