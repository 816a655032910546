// Package benchrig is the rig of heartbeatd's detection benchmarks, shared by internal/alarm's Go benchmarks
// and cmd/hbbench: the detection path wired as internal/daemon wires it (a deadline store, a scanner over every
// slot handing claims to the alarm handler, which publishes to Kafka and then acknowledges in Redis), on
// the caller's Redis and an in-process kfake broker of its own, timed by the wall clock through a Recorder
// in front of the publisher. It also holds the refresh load both use, and how the Go benchmarks of any
// package read their size from the environment (SizeFromEnv).
package benchrig

import (
	"context"
	"errors"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/alarm"
	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/correlate"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/eventkafka"
	"github.com/heartbeatd/heartbeatd/internal/history"
	"github.com/heartbeatd/heartbeatd/internal/kafkaclient"
	"github.com/heartbeatd/heartbeatd/internal/scan"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// EventsTopic is the topic the rig publishes to.
const EventsTopic = "heartbeat.events"

// policyYAML: one type whose timeout outlasts every run, so only the devices a run schedules come due,
// and no repeats, so every device yields exactly one interrupted event.
const policyYAML = `
types:
  default: {timeout: 30s, repeat_every: 0s}
`

// kafkaSegmentBytes rolls kfake's in-memory log segments at 1 MiB instead of Kafka's 100 MiB default:
// kfake grows a segment by copying it whole, ≈10% of hbbench's CPU at 1M events (a real broker appends
// to the page cache), and the detection figures are heartbeatd's, not the test broker's.
const kafkaSegmentBytes = "1048576"

// Kafka starts the benchmarks' kfake broker with the topics, partitions each; the caller closes it.
func Kafka(partitions int, topics ...string) (*testenv.Kafka, error) {
	return testenv.LaunchKafka(context.Background(), "", testenv.KafkaOptions{Topics: topics, Partitions: partitions,
		BrokerConfigs: map[string]string{"log.segment.bytes": kafkaSegmentBytes}})
}

// Rig is the detection path on one Redis and a kfake broker of its own.
type Rig struct {
	Store  *deadline.Store
	Events *Recorder // every event Kafka acknowledged

	rdb        redis.UniversalClient
	storeOpts  deadline.Options
	policies   *config.Policies
	parentWait time.Duration // detection.parent_wait, the daemon's default
	kafka      *testenv.Kafka
	pub        *eventkafka.Publisher
	// historyGroups numbers the consumer groups RecordHistory started.
	historyGroups int
}

// New builds a rig on rdb whose recorder has room for expected events; Close stops it. Every run starts
// by flushing rdb.
func New(rdb redis.UniversalClient, expected int) (*Rig, error) {
	return build(rdb, expected, policyYAML)
}

// NewStorm builds the rig of the Storm runs: New with the storm's types (stormPolicyYAML).
func NewStorm(rdb redis.UniversalClient, expected int) (*Rig, error) {
	return build(rdb, expected, stormPolicyYAML)
}

func build(rdb redis.UniversalClient, expected int, policy string) (*Rig, error) {
	cfg, err := config.Parse([]byte(policy), func(string) (string, bool) { return "", false })
	if err != nil {
		return nil, err
	}
	r := &Rig{rdb: rdb, policies: cfg.Policies(), parentWait: cfg.Detection.ParentWait}
	timeout := func(typ string) time.Duration { p, _ := r.policies.Lookup(typ); return p.Timeout }
	repeat := func(typ string) time.Duration { p, _ := r.policies.Lookup(typ); return p.RepeatEvery }
	r.storeOpts = deadline.Options{Slots: config.DefaultSlots, Timeout: timeout, RepeatEvery: repeat}
	if r.Store, err = deadline.New(rdb, r.storeOpts); err != nil {
		return nil, err
	}
	if r.kafka, err = Kafka(12, EventsTopic); err != nil {
		return nil, err
	}
	if r.pub, err = eventkafka.NewPublisher(eventkafka.PublisherOptions{Brokers: r.kafka.Addrs, Topic: EventsTopic}); err != nil {
		r.kafka.Close()
		return nil, err
	}
	r.Events = newRecorder(r.pub, expected)
	return r, nil
}

// RecordHistory records the rig's events in the incident history h (internal/history) from a consumer
// group of their topic, as the daemon does: a new group each call, started at the topic's end, so it
// records what is published from now on. stop ends it; between runs only.
func (r *Rig) RecordHistory(ctx context.Context, h *history.Store) (stop func(), err error) {
	r.historyGroups++
	g := kafkaclient.Group{Brokers: r.kafka.Addrs, Topic: EventsTopic, ID: "history-" + strconv.Itoa(r.historyGroups)}
	if _, err := g.StartAtEnd(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = h.Consume(ctx, g) // returns when ctx ends
	}()
	return func() { cancel(); <-done }, nil
}

// KafkaAddrs are the rig's broker addresses: a consumer of EventsTopic beside detection (the notifier
// in cmd/hbbench's notify scenario) reads there.
func (r *Rig) KafkaAddrs() []string { return r.kafka.Addrs }

// Close stops the publisher and the broker.
func (r *Rig) Close() {
	_ = r.pub.Close()
	r.kafka.Close()
}

// reset empties Redis and the recorder before a run.
func (r *Rig) reset(ctx context.Context) error {
	if err := r.rdb.FlushAll(ctx).Err(); err != nil {
		return err
	}
	r.Events.Reset()
	// A new store, as a replica starting on an empty Redis: one that outlived the flush would remember
	// parent links it wrote before it and write them no more.
	store, err := deadline.New(r.rdb, r.storeOpts)
	if err != nil {
		return err
	}
	r.Store = store
	return r.Store.Load(ctx, r.policies.Names()...)
}

// timeout is the silence timeout of the rig's one type.
func (r *Rig) timeout() time.Duration { return r.policies.Default().Timeout }

// startScanner runs a scanner over every slot with the daemon's detection defaults, handing claims to an
// alarm handler; the returned function stops it and waits.
func (r *Rig) startScanner() (stop func() error) { return r.startScannerWith(nil) }

// startScannerWith is startScanner with the handler correlating through corr (nil: off).
func (r *Rig) startScannerWith(corr *correlate.Correlator) (stop func() error) {
	h := alarm.NewHandler(alarm.HandlerOptions{Store: r.Store, Sink: r.Events, Policies: func() *config.Policies { return r.policies },
		ParentWait: r.parentWait, Correlator: corr})
	slots := make([]int, r.Store.Slots())
	for i := range slots {
		slots[i] = i
	}
	sc := scan.NewScanner(scan.ScannerOptions{Store: r.Store, Slots: func() []int { return slots }, Handle: h.Handle,
		MaxIdleWait: config.DefaultMaxIdleWait, Lease: config.DefaultLease, Batch: config.DefaultDetectionBatch,
		Concurrency: config.DefaultScanners})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sc.Run(ctx) }()
	return func() error {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}
}

// schedule writes devices prefix0..n-1 so that device i's deadline is deadlineOf(i), in batches of 4096
// typed signals.
func (r *Rig) schedule(ctx context.Context, prefix string, n int, deadlineOf func(i int) time.Time) error {
	return RefreshBatches(ctx, r.Store, 4096, n, func(i int) deadline.Signal {
		return deadline.Signal{Device: prefix + strconv.Itoa(i), Type: config.DefaultType, Seen: deadlineOf(i).Add(-r.timeout())}
	})
}

// RefreshBatches refreshes the signals signal(0..n-1) in batches of size, one batch at a time.
func RefreshBatches(ctx context.Context, st *deadline.Store, size, n int, signal func(i int) deadline.Signal) error {
	batch := make([]deadline.Signal, 0, size)
	for i := range n {
		batch = append(batch, signal(i))
		if len(batch) == cap(batch) || i == n-1 {
			if err := st.Refresh(ctx, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	return nil
}

// FirstDeadline leaves time to schedule n devices before the first of them is due. Scheduling runs at
// ≈300k signals/s on a quiet machine and far slower on a busy shared one, so the margin assumes 60k/s.
func FirstDeadline(n int) time.Time {
	return time.Now().Add(time.Second + time.Duration(n)*time.Second/60_000).Truncate(time.Millisecond)
}

// Ms is a duration in milliseconds with µs precision.
func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Quantile returns the q-quantile of sorted (nearest rank).
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// SizeFromEnv is the positive integer the environment variable name holds (HB_BENCH_DEVICES=1000000), or
// def when it is unset or holds anything else: `make test` runs the benchmarks once at a small size, a
// measurement at full size.
func SizeFromEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
