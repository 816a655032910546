package alarm

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/scan"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// The watchdog publishes one event per interval through the handler and the Kafka publisher, keyed and
// named by its replica; it stops while Kafka is down and while the scanner cannot claim (Redis down), and
// resumes after each. The timestamp metric moves only with an event Kafka acknowledged.
func TestWatchdog(t *testing.T) {
	srv := testenv.StartRedis(t)
	kafka := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{eventsTopic}})
	store, err := deadline.New(srv.Client(t), deadline.Options{Slots: 8, Timeout: func(string) time.Duration { return time.Minute }})
	require.NoError(t, err)
	pub := shortWritePublisher(t, kafka, 300*time.Millisecond)
	policies := parsePolicies(t, policyYAML)
	m := NewMetrics(nil)
	h := NewHandler(HandlerOptions{Store: store, Sink: pub, Policies: func() *config.Policies { return policies }, Metrics: m,
		Logger: zaptest.NewLogger(t)})
	scanner := scan.NewScanner(scan.ScannerOptions{Store: store, Slots: func() []int { return testenv.AllSlots(8) },
		Handle: h.Handle, MaxIdleWait: 20 * time.Millisecond, Concurrency: 2, Logger: zaptest.NewLogger(t)})
	const every = 100 * time.Millisecond
	w := NewWatchdog(WatchdogOptions{ReplicaID: "replica-a", Every: every, Handler: h, Alive: scanner.LastWakeUp,
		MaxQuiet: every + 20*time.Millisecond, Logger: zaptest.NewLogger(t)})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = scanner.Run(ctx) })
	wg.Go(func() { _ = w.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })

	published := func() float64 { return testenv.MetricValue(t, m.WatchdogPublished) }
	counted := func() float64 { return testenv.MetricValue(t, m.Events.WithLabelValues(string(event.Watchdog))) }
	watchdogs := func(n int) []event.Event {
		t.Helper()
		var out []event.Event
		kafka.ReadUntil(t, eventsTopic, 20*time.Second, func(recs []testenv.Record) bool {
			out = out[:0]
			for _, r := range recs {
				e, err := event.Decode(r.Value)
				require.NoError(t, err)
				require.Equal(t, event.Watchdog, e.Kind)
				require.Equal(t, "replica-a", string(r.Key), "keyed by the replica")
				out = append(out, e)
			}
			return len(out) >= n
		})
		require.GreaterOrEqual(t, len(out), n, "watchdog events on the topic")
		return out
	}
	// awaitTicks waits until c counted n more ticks than it had.
	awaitTicks := func(c *atomic.Int64, n int64) {
		t.Helper()
		target := c.Load() + n
		require.Eventually(t, func() bool { return c.Load() >= target }, 20*time.Second, 5*time.Millisecond)
	}

	evs := watchdogs(3)
	for i, e := range evs {
		require.Equal(t, "replica-a", e.DeviceID)
		require.Equal(t, event.WatchdogID("replica-a", e.At), e.ID)
		if i > 0 {
			require.True(t, e.At.After(evs[i-1].At), "one event per tick, in order")
		}
	}
	require.Eventually(t, func() bool { return published() > 0 && counted() >= 3 }, 10*time.Second, 5*time.Millisecond)

	// Kafka stopped: every tick fails and neither the timestamp nor the count moves.
	kafka.Stop()
	awaitTicks(&w.failed, 1) // ticks run one at a time: none is in flight after this one failed
	before, n := published(), counted()
	awaitTicks(&w.failed, 3)
	require.Equal(t, before, published())
	require.Equal(t, n, counted())
	kafka.Start(t) // an empty cluster: what it holds was published after the restart
	evs = watchdogs(1)
	require.Greater(t, float64(evs[0].At.UnixMilli())/1000, before)
	require.Eventually(t, func() bool { return published() > before }, 10*time.Second, 5*time.Millisecond)

	// Redis stopped: the scanner completes no claim, so the watchdog withholds its event though Kafka
	// takes it; it resumes once the scanner claims again.
	srv.Stop(t)
	awaitTicks(&w.withheld, 1)
	before = published()
	failed := w.failed.Load()
	awaitTicks(&w.withheld, 3)
	require.Equal(t, before, published())
	require.Equal(t, failed, w.failed.Load(), "nothing was even tried")
	srv.Start(t)
	require.Eventually(t, func() bool { return published() > before }, 20*time.Second, 5*time.Millisecond)
}
