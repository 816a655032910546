package ingest_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"

	"github.com/heartbeatd/heartbeatd/internal/holdback"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// watchedSource is kafkaSource observing its group every 50ms, tagged member.
func watchedSource(tb testing.TB, addrs []string, member string) *ingest.KafkaSource {
	tb.Helper()
	src, err := ingest.NewKafkaSource(ingest.KafkaOptions{
		Brokers: addrs, Topics: []string{signalTopic}, GroupID: "heartbeatd", Member: member,
		HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 6 * time.Second, RebalanceTimeout: 3 * time.Second,
		ProbeInterval: 100 * time.Millisecond, CommitInterval: 20 * time.Millisecond, WatchInterval: 50 * time.Millisecond,
		DrainTimeout: time.Second, Logger: zaptest.NewLogger(tb),
	})
	require.NoError(tb, err)
	return src
}

// awaitCaughtUp waits until src reports no lag worth a window and no blind spot.
func awaitCaughtUp(t *testing.T, src ingest.Source) {
	t.Helper()
	require.Eventually(t, func() bool {
		h := src.Health()
		return h.Connected && h.Lag < 500*time.Millisecond && h.Blind.IsZero()
	}, 30*time.Second, 10*time.Millisecond, "caught up: %+v", src.Health())
}

// TestKafkaLagOfAThrottledConsumer: a consumer that gets no records (a broker throttling it) while
// devices keep producing falls behind with nothing fetched and nothing waiting in the chain; the group's
// end offsets against its committed ones show the lag all the same, from when the records began to
// wait, and it clears once the backlog is read.
func TestKafkaLagOfAThrottledConsumer(t *testing.T) {
	tr, k := newKafkaTransport(t, 2)
	var throttled atomic.Bool
	k.StarveFetches(signalTopic, &throttled)
	p := startPipeline(t, policyStore(t, testenv.StartRedis(t).Client(t)), ingest.ChainOptions{})
	src := watchedSource(t, k.Addrs, "a/1")
	p.run(t, src)
	tr.send(t, rawFor([]string{"before"}, "")...)
	p.waitApplied(t, "before")
	awaitCaughtUp(t, src)

	throttled.Store(true)
	began := time.Now()
	ids := devices("throttled", 15)
	for _, id := range ids {
		tr.send(t, rawFor([]string{id}, "")...)
		time.Sleep(100 * time.Millisecond) // devices signalling while the consumer gets nothing
	}
	h := src.Health()
	require.True(t, h.Connected, "connected all along: only the records do not come")
	// A fetch waiting at the broker when the throttle began may still bring the first records.
	require.False(t, p.rec.has(ids[len(ids)-1]), "throttled")
	require.GreaterOrEqual(t, h.Lag, time.Since(began)-500*time.Millisecond, "lagging since the records began to wait: %+v", h)

	throttled.Store(false)
	p.waitApplied(t, ids...)
	awaitCaughtUp(t, src)
}

// TestKafkaRebalanceAndTakeOver: a member leaving makes the others rebalance: the group is a blind spot
// from before the rebalance until its partitions are read past it. The member's tag, which the others
// read from the group's description, is gone once it left, and TakenOver says so once the group has
// read past the time given.
func TestKafkaRebalanceAndTakeOver(t *testing.T) {
	tr, k := newKafkaTransport(t, 4)
	p := startPipeline(t, policyStore(t, testenv.StartRedis(t).Client(t)), ingest.ChainOptions{})
	a, b := watchedSource(t, k.Addrs, "a/1"), watchedSource(t, k.Addrs, "b/1")
	p.run(t, a)
	p.run(t, b)
	tr.send(t, rawFor(devices("both", 40), "")...)
	p.waitApplied(t, devices("both", 40)...)
	awaitCaughtUp(t, a)
	awaitCaughtUp(t, b)
	require.Eventually(t, func() bool { return !a.TakenOver("b/1", time.Now().Add(-time.Second)) }, 10*time.Second, 10*time.Millisecond)
	require.False(t, a.TakenOver("b/1", time.Now()), "b is a member")
	require.Equal(t, []holdback.Share{{Name: "kafka:heartbeatd", Signals: "kafka:" + signalTopic, Member: "a/1",
		Release: 6*time.Second + 100*time.Millisecond + 3*time.Second, Kept: true}}, a.Shares())

	var leaveAt atomic.Int64
	k.Cluster().ControlKey(int16(kmsg.LeaveGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		leaveAt.Store(time.Now().UnixNano())
		return nil, nil, false
	})
	left := time.Now()
	var blind time.Time
	stopped := make(chan error, 1)
	go func() { stopped <- p.stop(b) }()
	require.Eventually(t, func() bool {
		blind = a.Health().Blind
		return !blind.IsZero()
	}, 20*time.Second, 2*time.Millisecond, "the rebalance is a blind spot")
	require.NoError(t, <-stopped)
	require.NotZero(t, leaveAt.Load(), "b left the group")
	require.False(t, blind.After(time.Unix(0, leaveAt.Load())), "blind from before the rebalance: %s after %s", blind,
		time.Unix(0, leaveAt.Load()))
	tr.send(t, rawFor([]string{"after"}, "")...)
	p.waitApplied(t, "after")
	awaitCaughtUp(t, a)
	require.Eventually(t, func() bool { return a.TakenOver("b/1", left) }, 20*time.Second, 10*time.Millisecond)
	require.False(t, a.TakenOver("a/1", left), "a is still a member")
}
