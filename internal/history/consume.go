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

// recordShare is the share of the time the consumer may spend recording: during a storm it leaves Redis
// and the cores to the alarm loop and catches up after it, the events waiting in Kafka meanwhile.
const recordShare = 0.25

// recordSettle is how old an event is before the consumer records it: a burst of the alarm loop (a
// storm) is recorded after it, in large batches, rather than beside it.
const recordSettle = 2 * time.Second

// Consume records the events of the events topic, read through the consumer group g, until ctx ends
// (docs/concepts.md#incident-history). Every replica joins the group, so each event is recorded by one
// of them, off the alarm path. A batch's offsets are committed only once Redis holds what it changed:
// one the replica did not get to commit (a crash, Redis down, a rebalance) is read and recorded again,
// which changes nothing (Record is idempotent).
func (s *Store) Consume(ctx context.Context, g kafkaclient.Group) error {
	if g.Logger == nil {
		g.Logger = s.log
	}
	g.Settle = recordSettle
	if g.StartOffset == 0 {
		// A new group reads what the topic holds: an event published before the group's first commit
		// (the scanner runs beside this start) is recorded too, and one recorded already changes nothing.
		g.StartOffset = kafka.FirstOffset
	}
	events := make([]event.Event, 0, consumeBatch)
	retry := loop.RetryOptions{Backoff: loop.Backoff{Min: 200 * time.Millisecond, Max: 10 * time.Second},
		OnError: func(err error, failures int, retryIn time.Duration) {
			if failures == 1 || failures%10 == 0 {
				s.log.Warn("recording events in the history failed; retrying, their offsets uncommitted", zap.Error(err),
					zap.Int("failures", failures), zap.Duration("retry_in", retryIn))
			}
		}}
	pace := loop.Pacer{Share: recordShare}
	return g.Consume(ctx, consumeBatch, func(ctx context.Context, msgs []kafka.Message) bool {
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
			return false // ctx ended
		}
		s.lag.Set(max(0, time.Since(msgs[len(msgs)-1].Time).Seconds()))
		return pace.Wait(ctx, time.Since(start))
	})
}
