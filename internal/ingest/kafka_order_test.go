package ingest_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// TestKafkaPartitionsHandOverInRecordTimeOrder: a backlog whose partitions hold signals at different
// densities over the same two seconds reaches the chain roughly in record-time order. Read at the same
// pace by count, the sparse partitions would run ahead by more than a second, and deadlines written that
// far out of time order cost Redis far more (docs/benchmarks.md).
func TestKafkaPartitionsHandOverInRecordTimeOrder(t *testing.T) {
	const partitions, span = 4, 2 * time.Second
	k := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{signalTopic}, Partitions: partitions})
	// Partition 0 holds 10 signals a millisecond, the others 2.
	perMs := func(p int) int {
		if p == 0 {
			return 10
		}
		return 2
	}
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var msgs []kafka.Message
	for p := range partitions {
		for i := range int(span/time.Millisecond) * perMs(p) {
			msgs = append(msgs, kafka.Message{Key: []byte(fmt.Sprintf("p%d-%d", p, i)),
				Time: base.Add(time.Duration(i/perMs(p)) * time.Millisecond)})
		}
	}
	w := &kafka.Writer{Addr: kafka.TCP(k.Addrs...), Topic: signalTopic, BatchTimeout: time.Millisecond, BatchSize: 5000,
		RequiredAcks: kafka.RequireAll, Balancer: kafka.BalancerFunc(func(m kafka.Message, _ ...int) int {
			p, _, _ := strings.Cut(strings.TrimPrefix(string(m.Key), "p"), "-")
			n, _ := strconv.Atoi(p)
			return n
		})}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, w.WriteMessages(ctx, msgs...))
	require.NoError(t, w.Close())

	ref := &fakeRefresher{}
	// One batch at a time: the refresher sees the signals in the order the chain took them.
	f := startChain(t, ref, ingest.ChainOptions{MaxInFlight: 1, MaxClockSkew: 2 * time.Hour})
	src := kafkaSource(t, k.Addrs, nil, nil)
	srcCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(srcCtx, f.chain) }()
	t.Cleanup(func() { stop(); <-done })
	require.Eventually(t, func() bool { return len(ref.signals()) == len(msgs) }, time.Minute, 10*time.Millisecond)

	var newest time.Time
	var worst time.Duration
	for _, s := range ref.signals() {
		if s.Seen.After(newest) {
			newest = s.Seen
		}
		worst = max(worst, newest.Sub(s.Seen))
	}
	t.Logf("signals %d, furthest behind the newest before it: %v", len(msgs), worst)
	// Aligned, the drift stays within a few of a sparse partition's chunks (128ms each), up to 0.9s when
	// other tests starve this one of CPU; unaligned it passed 1.5s.
	require.Less(t, worst, 1200*time.Millisecond, "partitions drifted apart")
}
