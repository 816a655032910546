package kafkaclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/loop"
)

// Group is a consumer group of heartbeatd's own on a topic it publishes: the notifier's
// (internal/notify) and the incident history's (internal/history) on the events topic.
type Group struct {
	Brokers []string
	Topic   string
	ID      string
	Dialer  *kafka.Dialer
	// StartOffset is where the group starts on a partition it has no offset for: kafka.LastOffset (the
	// default, 0) after StartAtEnd, or kafka.FirstOffset.
	StartOffset int64
	// Queue is how many fetched records the reader holds ready (0: kafka-go's 100): a consumer taking
	// batches wants one batch of them.
	Queue int
	// Settle, when set, has Consume gather a batch only once its first record is this old (by its
	// timestamp, at most Settle from now): a consumer that should not compete with a burst of the
	// records' producer takes the burst after it, in larger batches.
	Settle time.Duration
	// Logger reports the reader's errors and the start's retries.
	Logger *zap.Logger
}

// CommitEvery is how often a group's reader commits the offsets marked handled: a crash reads again at
// most this much, and loses nothing.
const CommitEvery = 250 * time.Millisecond

// Open returns the group's reader, the caller closes it; a group starting at the end is first given its
// start offsets (StartAtEnd), retried with backoff until the brokers answer. It fails only when ctx ends.
func (g Group) Open(ctx context.Context) (*kafka.Reader, error) {
	log := g.Logger
	if log == nil {
		log = zap.NewNop()
	}
	start := g.StartOffset
	if start == 0 {
		start = kafka.LastOffset
	}
	if start == kafka.LastOffset {
		err := loop.Retry(ctx, loop.RetryOptions{Backoff: loop.Backoff{Min: 200 * time.Millisecond, Max: 10 * time.Second},
			OnError: func(err error, failures int, retryIn time.Duration) {
				if failures == 1 || failures%10 == 0 {
					log.Warn("setting the group's start offsets failed; retrying", zap.Error(err), zap.Duration("retry_in", retryIn))
				}
			}}, func(ctx context.Context) error {
			running, err := g.StartAtEnd(ctx)
			if running {
				log.Info("the group is already reading; not setting its start offsets")
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	cfg := kafka.ReaderConfig{Brokers: g.Brokers, GroupID: g.ID, Topic: g.Topic,
		Dialer: g.Dialer, StartOffset: start, MinBytes: 1, MaxBytes: 4 << 20, MaxWait: 250 * time.Millisecond,
		HeartbeatInterval: time.Second, SessionTimeout: 10 * time.Second, JoinGroupBackoff: time.Second,
		// CommitMessages marks a handled offset; the reader commits the marks this often (and at Close),
		// not one round trip per event.
		CommitInterval: CommitEvery, QueueCapacity: g.Queue,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			log.Warn("kafka reader: " + fmt.Sprintf(msg, args...))
		})}
	return kafka.NewReader(cfg), nil
}

// StartAtEnd gives every partition of the group's topic that the group has no offset for yet an offset
// at the partition's current end, before the group reads. A new consumer then reads what is published
// from its first start on, not the topic's history; and a record published after that start is never
// skipped, even when the consumer dies before its first commit on that partition (a reader's own "start
// at the end" would look for the end again at its next start). running reports that a member of the
// group already committed or will commit those partitions itself.
func (g Group) StartAtEnd(ctx context.Context) (running bool, err error) {
	transport := &kafka.Transport{DialTimeout: 10 * time.Second}
	if d := g.Dialer; d != nil {
		transport.TLS, transport.SASL = d.TLS, d.SASLMechanism
	}
	defer transport.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(g.Brokers...), Timeout: 10 * time.Second, Transport: transport}
	topic := g.Topic
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return false, fmt.Errorf("kafka: metadata of %s: %w", topic, err)
	}
	var parts []int
	for _, t := range meta.Topics {
		if t.Name == topic {
			if t.Error != nil {
				return false, fmt.Errorf("kafka: topic %s: %w", topic, t.Error)
			}
			for _, p := range t.Partitions {
				parts = append(parts, p.ID)
			}
		}
	}
	if len(parts) == 0 {
		return false, fmt.Errorf("kafka: topic %s has no partitions yet", topic)
	}
	fetched, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: g.ID, Topics: map[string][]int{topic: parts}})
	if err == nil && fetched.Error != nil {
		err = fetched.Error
	}
	committed := map[int]bool{}
	switch {
	case errors.Is(err, kafka.GroupIdNotFound): // a new group on some brokers (kfake); Kafka answers -1 offsets
	case err != nil:
		return false, fmt.Errorf("kafka: the offsets of group %s: %w", g.ID, err)
	default:
		for _, p := range fetched.Topics[topic] {
			committed[p.Partition] = p.Error == nil && p.CommittedOffset >= 0
		}
	}
	var missing []kafka.OffsetRequest
	for _, p := range parts {
		if !committed[p] {
			missing = append(missing, kafka.LastOffsetOf(p))
		}
	}
	if len(missing) == 0 {
		return false, nil
	}
	ends, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: missing}})
	if err != nil {
		return false, fmt.Errorf("kafka: the partitions' ends: %w", err)
	}
	var commits []kafka.OffsetCommit
	for _, p := range ends.Topics[topic] {
		if p.Error == nil {
			commits = append(commits, kafka.OffsetCommit{Partition: p.Partition, Offset: p.LastOffset})
		}
	}
	res, err := client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{GroupID: g.ID, GenerationID: -1,
		Topics: map[string][]kafka.OffsetCommit{topic: commits}})
	if err != nil {
		return false, fmt.Errorf("kafka: committing the partitions' ends: %w", err)
	}
	for _, p := range res.Topics[topic] {
		if p.Error != nil {
			return true, nil
		}
	}
	return false, nil
}

// gatherWait is how long a batch waits for a further record already on its way before it is handled.
const gatherWait = 5 * time.Millisecond

// Consume reads the group's topic until ctx ends, handing handle batches of at most batch records (at
// least 1): the first it waits for, then those that follow within a few milliseconds of each other.
// A batch's offsets are committed only after handle returned true; false means ctx ended before the
// batch was kept, and it is read again by whoever has its partitions next. Read and commit errors are
// retried with backoff. It returns nil when ctx ends, the error of Open otherwise.
func (g Group) Consume(ctx context.Context, batch int, handle func(ctx context.Context, msgs []kafka.Message) bool) error {
	batch = max(batch, 1)
	if batch > 1 && g.Queue == 0 {
		g.Queue = batch
	}
	r, err := g.Open(ctx)
	if err != nil {
		return nil // ctx ended
	}
	log := g.Logger
	if log == nil {
		log = zap.NewNop()
	}
	defer func() {
		if err := r.Close(); err != nil {
			log.Warn("closing the reader of "+g.Topic, zap.Error(err))
		}
	}()
	msgs := make([]kafka.Message, 0, batch)
	backoff := loop.Backoff{Min: 200 * time.Millisecond, Max: 10 * time.Second}
	for {
		if msgs, err = g.gather(ctx, r, msgs[:0]); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Warn("reading "+g.Topic+" failed; retrying", zap.Error(err))
			if !loop.Sleep(ctx, backoff.Next()) {
				return nil
			}
			continue
		}
		backoff.Reset()
		if !handle(ctx, msgs) {
			return nil
		}
		for ctx.Err() == nil {
			if err = r.CommitMessages(ctx, msgs...); err == nil {
				break
			}
			log.Warn("committing offsets of "+g.Topic+" failed; retrying", zap.Error(err))
			loop.Sleep(ctx, backoff.Next())
		}
	}
}

// gather waits for a record (and until it is Settle old), then adds those that follow within gatherWait
// of each other, up to the batch's capacity.
func (g Group) gather(ctx context.Context, r *kafka.Reader, batch []kafka.Message) ([]kafka.Message, error) {
	msg, err := r.FetchMessage(ctx)
	if err != nil {
		return batch, err
	}
	batch = append(batch, msg)
	if g.Settle > 0 && !loop.Sleep(ctx, min(time.Until(msg.Time.Add(g.Settle)), g.Settle)) {
		return batch[:0], ctx.Err()
	}
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
