// Package notify pages people from heartbeatd's own events topic (docs/notifications.md): a Kafka
// consumer group of its own reads every event, routes it by Alertmanager matchers to receivers
// (PagerDuty, Slack, webhooks, e-mail), and commits an offset only once every matching receiver took
// the event or its retry is kept in Redis. A slow or dead receiver never delays detection: the notifier
// only reads what the daemon already published.
package notify

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/kafkaclient"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// Options build a Notifier.
type Options struct {
	Notify config.Notify
	// Brokers, Topic and Dialer reach the events topic (events.kafka).
	Brokers []string
	Topic   string
	Dialer  *kafka.Dialer
	// StartOffset is where a new consumer group starts: kafka.LastOffset (the default, 0) pages about what
	// happens from now on, not about the topic's history.
	StartOffset int64
	Redis       redis.UniversalClient
	KeyPrefix   string
	// Labels looks up devices' labels (registry.Registry.Labels); nil: no labels.
	Labels     func(ctx context.Context, devices []string) ([]map[string]string, error)
	Now        func() time.Time
	Logger     *zap.Logger
	Registerer prometheus.Registerer
}

// Notifier is the notifications consumer.
type Notifier struct {
	opts      Options
	log       *zap.Logger
	now       func() time.Time
	routes    routing
	receivers map[string]*outlet
	order     []string // receiver names as configured
	store     *store
	metrics   *metrics
	bad       atomic.Int64 // records skipped as no event
	// clientID names this process in the consumer group (memberID).
	clientID string
	// readyBehind is Ready's bound on the records the held partitions are behind (readyBehind).
	readyBehind int64
}

// build compiles the receivers and routes: every template and matcher, each error naming its key.
func build(n config.Notify, now func() time.Time) (map[string]Receiver, routing, error) {
	var errs []error
	recv := map[string]Receiver{}
	for i, r := range n.Receivers {
		key := fmt.Sprintf("notify.receivers[%d]", i)
		var rc Receiver
		var err error
		if r.Email != nil {
			rc, err = newEmail(key, r, now)
		} else {
			rc, err = newHTTPReceiver(key, r, now)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		recv[r.Name] = rc
	}
	var rs routing
	for i, r := range n.Routes {
		rt, err := newRoute(i, r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rs = append(rs, rt)
	}
	return recv, rs, errors.Join(errs...)
}

// Check compiles the notify block as the notifier would, without connecting anywhere: check-config
// and a start refuse a template or matcher that does not parse.
func Check(n config.Notify) error {
	_, _, err := build(n, time.Now)
	return err
}

// New builds a Notifier; Run starts it.
func New(opts Options) (*Notifier, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.StartOffset == 0 {
		opts.StartOffset = kafka.LastOffset
	}
	recv, rs, err := build(opts.Notify, opts.Now)
	if err != nil {
		return nil, err
	}
	// The reader's own dialer, naming this process to the group so Ready finds its membership.
	dialer := &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true}
	if opts.Dialer != nil {
		d := *opts.Dialer
		dialer = &d
	}
	dialer.ClientID = memberID()
	opts.Dialer = dialer
	n := &Notifier{clientID: dialer.ClientID, readyBehind: readyBehind, opts: opts, log: opts.Logger.With(zap.String("component", "notify")), now: opts.Now, routes: rs,
		receivers: map[string]*outlet{}, metrics: newMetrics(opts.Registerer),
		store: &store{rdb: opts.Redis, keys: newKeyspace(opts.KeyPrefix), ttl: opts.Notify.GiveUp() + time.Hour}}
	for _, r := range opts.Notify.Receivers {
		every, burst, _ := r.RateLimit() // validated
		n.receivers[r.Name] = newOutlet(n, recv[r.Name], every, burst, r.DeliveryTimeout())
		n.order = append(n.order, r.Name)
	}
	return n, nil
}

// Run reads the events topic and delivers until ctx ends; the retry and summary loops of every receiver
// run beside it. An event handled but not committed when ctx ends is read again by the next run.
func (n *Notifier) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, name := range n.order {
		o := n.receivers[name]
		wg.Go(func() { o.retries(ctx) })
		wg.Go(func() { o.summaries(ctx) })
	}
	err := n.consume(ctx)
	wg.Wait()
	return err
}

func (n *Notifier) consume(ctx context.Context) error {
	return n.group().Consume(ctx, 1, func(ctx context.Context, msgs []kafka.Message) bool {
		if !n.handleUntilKept(ctx, msgs[0].Value) {
			return false // not committed: read again by whoever has the partition next
		}
		n.metrics.lag.Set(max(0, time.Since(msgs[0].Time).Seconds()))
		return true
	})
}

// group is the notifier's consumer group on the events topic.
func (n *Notifier) group() kafkaclient.Group {
	return kafkaclient.Group{Brokers: n.opts.Brokers, Topic: n.opts.Topic, ID: n.opts.Notify.GroupID, Dialer: n.opts.Dialer,
		StartOffset: n.opts.StartOffset, Logger: n.log}
}

// handleUntilKept handles one record until every receiver took it or its retry is kept (Redis may be
// down: nothing is committed meanwhile); false when ctx ended first.
func (n *Notifier) handleUntilKept(ctx context.Context, value []byte) bool {
	e, err := event.Decode(value)
	if err != nil {
		n.metrics.badEvents.Inc()
		// The first and every thousandth: a topic full of foreign records must not flood the log.
		if bad := n.bad.Add(1); bad == 1 || bad%1000 == 0 {
			n.log.Warn("skipping records of the events topic that are no event", zap.Int64("so_far", bad), zap.Error(err))
		}
		return true
	}
	var backoff loop.Backoff
	backoff.Min, backoff.Max = 100*time.Millisecond, 10*time.Second
	for ctx.Err() == nil {
		err := n.handle(ctx, &e)
		if err == nil {
			return true
		}
		n.log.Warn("keeping a notification failed (Redis?); the event is handled again", zap.String("event", e.ID), zap.Error(err))
		loop.Sleep(ctx, backoff.Next())
	}
	return false
}

// handle routes one event and hands it to each receiver it matches.
func (n *Notifier) handle(ctx context.Context, e *event.Event) error {
	if e.Kind == event.Watchdog || !e.Kind.Valid() {
		return nil
	}
	var labels map[string]string
	if n.opts.Labels != nil && e.Group == nil {
		ls, err := n.opts.Labels(ctx, []string{e.DeviceID})
		if err != nil {
			return fmt.Errorf("labels: %w", err)
		}
		labels = ls[0]
	}
	var lookupErr error
	parentLabels := func() map[string]string {
		if n.opts.Labels == nil {
			return nil
		}
		ls, err := n.opts.Labels(ctx, []string{e.Parent})
		if err != nil {
			lookupErr = err
			return nil
		}
		return ls[0]
	}
	hits := n.routes.match(e, labels, parentLabels)
	if lookupErr != nil {
		return fmt.Errorf("labels: %w", lookupErr)
	}
	for _, h := range hits {
		o := n.receivers[h.receiver]
		if h.held != "" {
			n.metrics.count(h.receiver, h.held)
			continue
		}
		if err := o.offer(ctx, e, labels); err != nil {
			return fmt.Errorf("%s: %w", h.receiver, err)
		}
	}
	return nil
}

// Test sends a sample event to one receiver directly, as `heartbeatd notify test` does.
func (n *Notifier) Test(ctx context.Context, receiver string) error {
	o, ok := n.receivers[receiver]
	if !ok {
		return fmt.Errorf("notify: no receiver %q (have %v)", receiver, n.order)
	}
	now := n.now()
	e := event.New(event.Interrupted, "heartbeatd-test-device", "test", now, now.Add(-time.Minute), now, 0)
	e.Note = "a test notification sent by `heartbeatd notify test`"
	d := &Data{Event: e, Labels: map[string]string{"site": "test"}, Receiver: receiver, Incident: e.ID}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	return o.recv.Send(ctx, d)
}

// DeadLetters lists a receiver's newest n dead letters, for operators and tests.
func (n *Notifier) DeadLetters(ctx context.Context, receiver string, limit int) ([]DeadLetter, error) {
	return n.store.DeadLetters(ctx, receiver, limit)
}
