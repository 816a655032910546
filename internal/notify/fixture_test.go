package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// TestMain stops the servers the package's tests share, and fails when a goroutine outlives them: every
// loop of the notifier ends with its Run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(testenv.Shared(m)) }

// waitFor bounds every wait on a notification: generous for a small shared machine; polled, so a fast
// run is not slowed.
const waitFor = 30 * time.Second

// fixture is a real Redis, an in-process Kafka holding the events topic, a producer of events, and the
// recording receiver server.
type fixture struct {
	t        testing.TB
	log      *zap.Logger
	rdb      redis.UniversalClient
	kafka    *testenv.Kafka
	producer *kgo.Client
	srv      *receiverServer
	t0       time.Time

	mu     sync.Mutex
	labels map[string]map[string]string
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	k := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{testenv.EventsTopic}})
	log := zap.NewNop() // a benchmark's log would be its output
	if _, ok := t.(*testing.T); ok {
		log = zaptest.NewLogger(t)
	}
	f := &fixture{t: t, log: log, rdb: testenv.StartRedis(t).Client(t), kafka: k, srv: newReceiverServer(t),
		t0: time.Now().Add(-time.Hour).Truncate(time.Second), labels: map[string]map[string]string{}}
	f.producer = k.Client(t, kgo.DefaultProduceTopic(testenv.EventsTopic))
	return f
}

// notifyConfig parses a notify block as heartbeatd would; {{url}} stands for the receiver server.
func (f *fixture) notifyConfig(block string, env map[string]string) config.Notify {
	f.t.Helper()
	cfg, err := config.Parse([]byte("types: {default: {}}\n"+strings.ReplaceAll(block, "{{url}}", f.srv.URL)),
		func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(f.t, err)
	return cfg.Notify
}

// newNotifier builds a notifier of the block reading the events topic from its start.
func (f *fixture) newNotifier(n config.Notify, reg prometheus.Registerer) *Notifier {
	f.t.Helper()
	nt, err := New(Options{Notify: n, Brokers: f.kafka.Addrs, Topic: testenv.EventsTopic, StartOffset: kafka.FirstOffset,
		Redis: f.rdb, KeyPrefix: "hb", Labels: f.lookupLabels, Logger: f.log, Registerer: reg})
	require.NoError(f.t, err)
	return nt
}

// run runs nt until the test ends or the returned stop is called (which waits for it to return).
func (f *fixture) run(nt *Notifier) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- nt.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(f.t, <-done)
		})
	}
	f.t.Cleanup(stop)
	return stop
}

func (f *fixture) setLabels(device string, labels map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.labels[device] = labels
}

func (f *fixture) lookupLabels(_ context.Context, devices []string) ([]map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]map[string]string, len(devices))
	for i, d := range devices {
		out[i] = f.labels[d]
	}
	return out, nil
}

// publish writes events to the events topic, keyed by device as heartbeatd does.
func (f *fixture) publish(events ...event.Event) {
	f.t.Helper()
	recs := make([]*kgo.Record, len(events))
	for i, e := range events {
		b, err := json.Marshal(e)
		require.NoError(f.t, err)
		recs[i] = &kgo.Record{Key: []byte(e.DeviceID), Value: b}
	}
	require.NoError(f.t, f.producer.ProduceSync(context.Background(), recs...).FirstErr())
}

// incident is the interrupted and recovered events of one incident of device, its deadline n minutes
// after t0.
func (f *fixture) incident(device, typ string, n int) (interrupted, recovered event.Event) {
	dl := f.t0.Add(time.Duration(n) * time.Minute)
	last := dl.Add(-time.Minute)
	interrupted = event.New(event.Interrupted, device, typ, dl, last, dl.Add(10*time.Millisecond), 0)
	recovered = event.New(event.Recovered, device, typ, dl, last, dl.Add(30*time.Second), 0)
	return interrupted, recovered
}

// devices names n devices prefix-0 … prefix-(n-1).
func devices(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}
