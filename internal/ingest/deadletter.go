package ingest

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// dlJob is one piece of bad input waiting for its dead letter to be written.
type dlJob struct {
	dl  event.DeadLetter
	ack func()
}

// batchDeadLetterSink is the optional batch form of event.DeadLetterSink (the internal/eventkafka Publisher
// has it): one round trip for a burst of bad input.
type batchDeadLetterSink interface {
	PublishDeadLetters(ctx context.Context, ds []event.DeadLetter) []error
}

// deadLetter counts bad input and queues its dead letter. A burst larger than the queue waits for room
// while the dead-letter topic takes writes (the writer drains thousands a second, so valid neighbours wait
// for milliseconds, never for a broken topic): losing the dead letters of a flood would break docs/signals.md's
// promise that every bad message reaches the topic. While the topic refuses writes, or after waiting
// DeadLetterTimeout, the message is acknowledged without its dead letter (counted and logged), so bad
// input can never stall the good.
func (c *Chain) deadLetter(ctx context.Context, m *Message, src *sourceMetrics, reason string, now time.Time) error {
	src.deadLetter.Inc()
	c.m.deadLetters.WithLabelValues(reason).Inc()
	if c.dl == nil {
		c.log.Debug("bad input (no dead-letter topic)", zap.String("reason", reason), zap.String("source", m.Source), zap.String("topic", m.Topic))
		if m.Ack != nil {
			m.Ack()
		}
		return nil
	}
	d := event.NewDeadLetter(reason, m.Source, m.Topic, m.Payload, now)
	if len(m.Key) > 0 {
		d.SetKey(m.Key) // bounded: a huge key must not make its dead letter, and its neighbours, too large for Kafka
	}
	job := dlJob{dl: d, ack: m.Ack}
	queued, err := c.enqueueDeadLetter(ctx, job, nil)
	if !queued && err == nil && !c.dlFailing.Load() {
		wait := time.NewTimer(c.opts.DeadLetterTimeout)
		defer wait.Stop()
		queued, err = c.enqueueDeadLetter(ctx, job, wait.C)
	}
	if queued || err != nil {
		return err
	}
	c.m.deadLetterLost.Inc()
	c.log.Error("dead-letter queue full; acknowledging bad input without its dead letter",
		zap.String("reason", reason), zap.String("source", m.Source), zap.String("topic", m.Topic))
	if m.Ack != nil {
		m.Ack()
	}
	return nil
}

// enqueueDeadLetter queues job, waiting for room until giveUp fires; a nil giveUp only tries.
func (c *Chain) enqueueDeadLetter(ctx context.Context, job dlJob, giveUp <-chan time.Time) (bool, error) {
	if giveUp == nil {
		select {
		case c.dlq <- job:
			return true, nil
		default:
			return false, nil
		}
	}
	select {
	case c.dlq <- job:
		return true, nil
	case <-ctx.Done():
		return false, fmt.Errorf("ingest: submit: %w", ctx.Err())
	case <-c.done:
		return false, ErrChainStopped
	case <-giveUp:
		return false, nil
	}
}

// deadLetterLoop writes queued dead letters in bursts, each retried with backoff for at most
// DeadLetterTimeout, then acknowledges their messages.
func (c *Chain) deadLetterLoop(ctx context.Context) {
	jobs := make([]dlJob, 0, 256)
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-c.dlq:
			jobs = append(jobs[:0], j)
		}
	more:
		for len(jobs) < cap(jobs) {
			select {
			case j := <-c.dlq:
				jobs = append(jobs, j)
			default:
				break more
			}
		}
		if !c.publishDeadLetters(ctx, jobs) {
			return // shutting down: the messages stay unacknowledged and come again
		}
		clear(jobs)
	}
}

// publishDeadLetters writes jobs and acknowledges each once written or given up on. False when ctx ended.
func (c *Chain) publishDeadLetters(ctx context.Context, jobs []dlJob) bool {
	giveUp := time.Now().Add(c.opts.DeadLetterTimeout)
	pending := jobs
	var lastErr error
	backoff := loop.Backoff{Min: 50 * time.Millisecond, Max: time.Second}
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt > 0 {
			wait := backoff.Next()
			if time.Now().Add(wait).After(giveUp) {
				break
			}
			if !loop.Sleep(ctx, wait) {
				return false
			}
		}
		actx, cancel := context.WithDeadline(ctx, giveUp)
		errs := c.publish(actx, pending)
		cancel()
		if ctx.Err() != nil {
			return false
		}
		failed := pending[:0]
		for i, j := range pending {
			if errs[i] == nil {
				if j.ack != nil {
					j.ack()
				}
				continue
			}
			lastErr = errs[i]
			failed = append(failed, j)
		}
		pending = failed
		c.dlFailing.Store(len(failed) > 0)
	}
	for _, j := range pending {
		c.m.deadLetterLost.Inc()
		c.log.Error("dead letter not written; acknowledging the bad input anyway so it cannot hold up valid signals",
			zap.String("reason", j.dl.Reason), zap.String("source", j.dl.Source), zap.String("topic", j.dl.Topic), zap.Error(lastErr))
		if j.ack != nil {
			j.ack()
		}
	}
	return true
}

func (c *Chain) publish(ctx context.Context, jobs []dlJob) []error {
	if b, ok := c.dl.(batchDeadLetterSink); ok {
		ds := make([]event.DeadLetter, len(jobs))
		for i, j := range jobs {
			ds[i] = j.dl
		}
		return b.PublishDeadLetters(ctx, ds)
	}
	errs := make([]error, len(jobs))
	for i, j := range jobs {
		errs[i] = c.dl.PublishDeadLetter(ctx, j.dl)
	}
	return errs
}
