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
// pace by count, the sparse partitions would run ahead by up to 1.6 s, and deadlines written that far out
// of time order cost Redis far more (docs/benchmarks.md). The aligner's waits are widened: production's
// 20 ms a chunk fits a build without the race detector (drift ≈ 0.2 s over 4 s), not one twenty times
// slower, whose drift then passed the one-second band past which partitions are not waited for.
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

	t.Cleanup(ingest.WidenAlignment(time.Second, 2*time.Second))
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
	// Aligned, the drift stays within a few of a sparse partition's chunks (128ms each); unaligned it
	// passes 1.5 s.
	require.Less(t, worst, 600*time.Millisecond, "partitions drifted apart")
}
