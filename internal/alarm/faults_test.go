package alarm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/eventkafka"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/sweep"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// shortWrites makes f publish through a Kafka publisher whose writes give up after timeout, so a test
// can fail many publications against a stopped broker without waiting long for each.
func (f *fixture) shortWrites(timeout time.Duration) {
	f.t.Helper()
	f.sink = &testenv.EventLog{Next: shortWritePublisher(f.t, f.kafka, timeout)}
	f.handler = f.newHandler()
}

// shortWritePublisher is a publisher to k's events topic whose writes give up after timeout, closed when
// the test ends.
func shortWritePublisher(t *testing.T, k *testenv.Kafka, timeout time.Duration) *eventkafka.Publisher {
	t.Helper()
	pub, err := eventkafka.NewPublisher(eventkafka.PublisherOptions{Brokers: k.Addrs, Topic: eventsTopic,
		WriteTimeout: timeout, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// Kafka stopped for longer than the old budget of 10 attempts (≈ 3 minutes of backoff): the claims stay
// leased and are tried every PublishBackoffMax, nothing is parked, and the events go out once it is back.
func TestKafkaDownForLongParksNothing(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		f.shortWrites(300 * time.Millisecond)
		f.signal("d1", "", 0)
		f.signal("d2", "", 0)
		f.kafka.Stop()
		at := 10*time.Second + time.Millisecond
		const attempts = 12 // 5.5 minutes of clock
		for range attempts {
			require.Empty(t, f.at(at))
			at += PublishBackoffMax
		}
		c, err := f.Store.Count(ctx)
		require.NoError(t, err)
		require.Zero(t, c.Parked)
		d, _, err := f.Store.Device(ctx, "d1")
		require.NoError(t, err)
		require.Equal(t, attempts, d.Incident.Failures)
		require.Zero(t, d.Incident.Next, "nothing recorded as sent")

		f.kafka.Start(t)
		// The writer finds the broker again within its metadata refresh (real time): retry until then.
		var got []string
		require.Eventually(t, func() bool {
			got = append(got, f.at(at)...)
			at += PublishBackoffMax
			return slices.Contains(got, "d1 interrupted 0") && slices.Contains(got, "d2 interrupted 0")
		}, 20*time.Second, 50*time.Millisecond, "the events once Kafka is back")
		c, err = f.Store.Count(ctx)
		require.NoError(t, err)
		require.Zero(t, c.Parked)
	})
}

// setMaxMessageBytes sets the events topic's max.message.bytes, as an operator would.
func setMaxMessageBytes(t *testing.T, k *testenv.Kafka, n int) {
	t.Helper()
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name, cfg.Op = "max.message.bytes", kmsg.IncrementalAlterConfigOpSet
	v := strconv.Itoa(n)
	cfg.Value = &v
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, eventsTopic
	res.Configs = append(res.Configs, cfg)
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(context.Background(), k.Client(t))
	require.NoError(t, err)
	for _, r := range resp.Resources {
		require.Zero(t, r.ErrorCode, "alter %s: %v", r.ResourceName, r.ErrorMessage)
	}
}

// An event Kafka refuses for its content is parked after MaxPublishAttempts (3) refusals, named in the
// parked claims /v1/stats shows, and published once requeued after the topic takes it.
func TestRefusedEventParkedThenRequeued(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		setMaxMessageBytes(t, f.kafka, 1000)
		poison := "p-" + strings.Repeat("x", 600) // its event is ≈ 2 kB
		f.signal(poison, "", 0)
		f.signal("d1", "", 0)
		require.Equal(t, []string{"d1 interrupted 0"}, f.at(10*time.Second+time.Millisecond), "the neighbour goes out")
		require.Empty(t, f.at(40*time.Second))
		c, err := f.Store.Count(ctx)
		require.NoError(t, err)
		require.Zero(t, c.Parked, "two refusals")
		f.at(70*time.Second + 2*time.Millisecond) // the third: parked (and d1's repeat 1)

		c, err = f.Store.Count(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 1, c.Parked)
		parked, err := f.Store.ParkedClaims(ctx, 10)
		require.NoError(t, err)
		require.Len(t, parked, 1)
		require.Equal(t, poison, parked[0].Device)
		require.True(t, strings.HasPrefix(parked[0].Reason, "refused: "), parked[0].Reason)
		require.Contains(t, parked[0].Reason, "Message Size Too Large")
		require.NotContains(t, f.at(10*time.Minute), poison+" interrupted 0", "parked: not tried again")

		setMaxMessageBytes(t, f.kafka, 1<<20)
		n, err := f.Store.Requeue(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		got := f.at(10*time.Minute + time.Millisecond)
		require.Contains(t, got, poison+" interrupted 0")
	})
}

// probeFailure fails, once armed, the next round trip that carries only recovery probes (ZADD XX into
// an alarms set): a failover or a dropped connection right after a refresh's deadline write.
type probeFailure struct {
	armed, fired atomic.Bool
}

func (h *probeFailure) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *probeFailure) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *probeFailure) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if onlyProbes(cmds) && h.armed.CompareAndSwap(true, false) {
			h.fired.Store(true)
			err := errors.New("injected: connection reset during the recovery probe")
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// onlyProbes tells a pipeline of recovery probes: scripts with one key, a slot's alarms set.
func onlyProbes(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		a := c.Args()
		if c.Name() != "evalsha" || len(a) < 4 || fmt.Sprint(a[2]) != "1" {
			return false
		}
		if key, _ := a[3].(string); !strings.HasSuffix(key, ":alarms") {
			return false
		}
	}
	return len(cmds) > 0
}

// acknowledgedIncident leaves dev interrupted, its interruption published and acknowledged by an
// operator: dormant (no act) until it signals again. It returns the probe failure hook, not yet armed.
func acknowledgedIncident(t *testing.T, f *fixture, dev string) *probeFailure {
	t.Helper()
	f.signal(dev, "", 0)
	require.Equal(t, []string{dev + " interrupted 0"}, f.at(10*time.Second+time.Millisecond))
	ok, err := f.Store.SetAcked(context.Background(), dev, 0)
	require.NoError(t, err)
	require.True(t, ok)
	require.Empty(t, f.at(70*time.Second+2*time.Millisecond), "acknowledged: no repeat")
	hook := &probeFailure{}
	f.RDB.AddHook(hook)
	return hook
}

// The signal that ends an acknowledged incident reaches Redis, but the round trip of its recovery probe
// fails: the chain's retry probes again, so `recovered` still comes.
func TestRecoveryProbeRoundTripFailsRecoveredStillComes(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		hook := acknowledgedIncident(t, f, "d1")
		chain, err := ingest.NewChain(f.Store, nil, ingest.ChainOptions{Now: f.Clock.Now, Logger: zaptest.NewLogger(t)})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); _ = chain.Run(ctx) }()
		defer func() { cancel(); wg.Wait() }()

		f.Clock.Set(f.T0.Add(80 * time.Second))
		hook.armed.Store(true)
		acked := make(chan struct{})
		// A typed signal: its write is a plain ZADD, its probe a second round trip (deadline.Store.Refresh).
		msg := ingest.Message{Source: ingest.SourceMQTT, Device: "d1", Type: "default", Ack: func() { close(acked) }}
		require.NoError(t, chain.Submit(ctx, msg))
		select {
		case <-acked:
		case <-time.After(10 * time.Second):
			t.Fatal("the signal was never stored")
		}
		require.True(t, hook.fired.Load(), "the probe's round trip failed")
		require.Equal(t, []string{"d1 recovered 0"}, f.at(80*time.Second+time.Millisecond))
	})
}

// A process that dies between a refresh's deadline write and its probe: the source delivers the signal
// again, whose write then adds nothing and probes nothing. The dormant sweep finds the incident and
// `recovered` comes within its interval.
func TestCrashBeforeRecoveryProbeRecoveredWithinSweep(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		hook := acknowledgedIncident(t, f, "d1")
		hook.armed.Store(true)
		sig := []deadline.Signal{{Device: "d1", Type: "default", Seen: f.T0.Add(80 * time.Second)}}
		require.Error(t, f.Store.Refresh(ctx, sig), "the crash: the deadline is written, its probe is not")
		require.NoError(t, f.Store.Refresh(ctx, sig), "the redelivery")
		require.Empty(t, f.at(80*time.Second+time.Millisecond), "nothing due: the gap the sweep closes")

		sweeper := sweep.New(sweep.Options{Store: f.Store, Every: 20 * time.Millisecond,
			Slots: func() []int { return testenv.AllSlots(f.Store.Slots()) }})
		sctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); _ = sweeper.Run(sctx) }()
		defer func() { cancel(); wg.Wait() }()
		require.Eventually(t, func() bool {
			d, _, err := f.Store.Device(ctx, "d1")
			return err == nil && !d.NextAct.IsZero()
		}, 10*time.Second, 5*time.Millisecond, "the sweep makes the incident due")
		require.Equal(t, []string{"d1 recovered 0"}, f.at(81*time.Second))
	})
}
