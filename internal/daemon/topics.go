package daemon

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/eventkafka"
	"github.com/heartbeatd/heartbeatd/internal/loop"
)

// ensureTopics makes sure the events and dead-letter topics exist, creating them when
// events.kafka.create_topics allows, and retries with backoff until they do: Kafka may start after
// heartbeatd, and an operator may create them by hand meanwhile. Until then /readyz says not ready.
// Then it idles until shutdown: a stage that ends early would stop the daemon.
func (d *daemon) ensureTopics(ctx context.Context) error {
	err := loop.Retry(ctx, loop.RetryOptions{Backoff: loop.Backoff{Min: time.Second, Max: time.Minute},
		OnError: func(err error, failures int, retryIn time.Duration) {
			var missing *eventkafka.MissingTopicsError
			if !errors.As(err, &missing) {
				if failures == 1 || failures%10 == 0 {
					d.log.Warn("checking the Kafka topics failed; retrying", zap.Error(err), zap.Duration("retry_in", retryIn))
				}
				return
			}
			// Every time (at most once a minute): nothing is published until an operator acts.
			msg := "Kafka topics are missing and events.kafka.create_topics is off: create them"
			if missing.Cause != nil {
				msg = "Kafka refused to create the missing topics: create them, or fix events.kafka.create_topics"
			}
			d.log.Error(msg, zap.Strings("topics", missing.Topics), zap.Strings("commands", missing.Commands),
				zap.NamedError("refusal", missing.Cause), zap.Duration("retry_in", retryIn))
		}},
		func(ctx context.Context) error {
			created, err := d.publisher.EnsureTopics(ctx)
			if len(created) > 0 {
				c := d.cfg.Events.Kafka.CreateTopics
				d.log.Info("created Kafka topics", zap.Strings("topics", created), zap.Int("partitions", c.Partitions),
					zap.Int("replication_factor", c.ReplicationFactor))
			}
			return err
		})
	if err != nil && ctx.Err() == nil {
		return err
	}
	<-ctx.Done()
	return nil
}
