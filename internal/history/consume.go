package history

import (
	"context"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/kafkaclient"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// consumeBatch bounds the records recorded together: one fold and one script call per bucket for all of
// them, so a storm costs Redis a few calls per batch rather than per claim.
const consumeBatch = 2048

// gatherWait is how long a batch waits for a further record already on its way before it is recorded.
const gatherWait = 5 * time.Millisecond

// recordShare is the share of the time the consumer may spend recording: during a storm it leaves Redis
// and the cores to the alarm loop and catches up after it, the events waiting in Kafka meanwhile.
const recordShare = 0.25

// Consume records the events of the events topic, read through the consumer group g, until ctx ends
// (docs/concepts.md#incident-history). Every replica joins the group, so each event is recorded by one
// of them, off the alarm path. A batch's offsets are committed only once Redis holds what it changed:
// one the replica did not get to commit (a crash, Redis down, a rebalance) is read and recorded again,
// which changes nothing (Record is idempotent).
func (s *Store) Consume(ctx context.Context, g kafkaclient.Group) error {
	g.Queue = consumeBatch
	if g.Logger == nil {
		g.Logger = s.log
	}
	r, err := g.Open(ctx)
	if err != nil {
		return nil // ctx ended
	}
	defer func() {
		if err := r.Close(); err != nil {
			s.log.Warn("closing the events reader", zap.Error(err))
		}
	}()
	msgs := make([]kafka.Message, 0, consumeBatch)
	events := make([]event.Event, 0, consumeBatch)
	backoff := loop.Backoff{Min: 200 * time.Millisecond, Max: 10 * time.Second}
	retry := loop.RetryOptions{Backoff: backoff, OnError: func(err error, failures int, retryIn time.Duration) {
		if failures == 1 || failures%10 == 0 {
			s.log.Warn("recording events in the history failed; retrying, their offsets uncommitted", zap.Error(err),
				zap.Int("failures", failures), zap.Duration("retry_in", retryIn))
		}
	}}
	pace := loop.Pacer{Share: recordShare}
	for {
		if msgs, err = gather(ctx, r, msgs[:0]); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.log.Warn("reading the events topic failed; retrying", zap.Error(err))
			if !loop.Sleep(ctx, backoff.Next()) {
				return nil
			}
			continue
		}
		backoff.Reset()
		events = events[:0]
		for _, m := range msgs {
			e, err := event.Decode(m.Value)
			if err != nil {
				s.anomalies.WithLabelValues("unreadable").Inc()
				continue
			}
			events = append(events, e)
		}
		start := time.Now()
		if loop.Retry(ctx, retry, func(ctx context.Context) error { return s.Record(ctx, events) }) != nil {
			return nil // ctx ended: not committed, read again by whoever has the partitions next
		}
		took := time.Since(start)
		s.lag.Set(max(0, time.Since(msgs[len(msgs)-1].Time).Seconds()))
		for ctx.Err() == nil {
			if err = r.CommitMessages(ctx, msgs...); err == nil {
				break
			}
			s.log.Warn("committing the history's offsets failed; retrying", zap.Error(err))
			loop.Sleep(ctx, backoff.Next())
		}
		if !pace.Wait(ctx, took) {
			return nil
		}
	}
}

// gather waits for a record, then adds those that follow within gatherWait of each other, up to the
// batch's capacity.
func gather(ctx context.Context, r *kafka.Reader, batch []kafka.Message) ([]kafka.Message, error) {
	msg, err := r.FetchMessage(ctx)
	if err != nil {
		return batch, err
	}
	batch = append(batch, msg)
	for len(batch) < cap(batch) {
		wait, cancel := context.WithTimeout(ctx, gatherWait)
		msg, err := r.FetchMessage(wait) // a fetch its context ended takes nothing off the reader
		cancel()
		if err != nil {
			break
		}
		batch = append(batch, msg)
	}
	return batch, nil
}
