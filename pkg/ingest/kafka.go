package ingest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/pkg/config"
)

// KafkaOptions configures the Kafka source (config: ingest.kafka).
type KafkaOptions struct {
	Brokers []string
	Topics  []string
	GroupID string
	TLS     *tls.Config    // nil: plaintext
	SASL    sasl.Mechanism // nil: none; see internal/kafkaclient
	// CommitInterval is the least time between two offset commits (default 100ms): commits are
	// coalesced, and a crash replays at most this much (harmless: deadlines only move forward).
	CommitInterval time.Duration
	// ProbeInterval is how often the connection to the brokers is checked for Health (default 2s).
	ProbeInterval time.Duration
	// SessionTimeout of the consumer group (default config.DefaultKafkaSessionTimeout). RebalanceTimeout
	// defaults to it: the coordinator waits this long for members to rejoin a rebalance, a killed member
	// never does, so it bounds a restarted replica's first assignment as much as the session does.
	// HeartbeatInterval defaults to a third of the session, Kafka's advice.
	SessionTimeout    time.Duration
	RebalanceTimeout  time.Duration
	HeartbeatInterval time.Duration
	// DialTimeout bounds one connection attempt (default 10s).
	DialTimeout time.Duration
	// DrainTimeout is how long Run waits at shutdown for the messages it submitted to be applied, so
	// their offsets can be committed (default 5s).
	DrainTimeout time.Duration
	Logger       *zap.Logger
}

// KafkaSource reads the signal topics as a consumer group and commits a partition's offset only past
// messages whose deadline write Redis acknowledged.
type KafkaSource struct {
	opts    KafkaOptions
	log     *zap.Logger
	health  *healthState
	offsets *offsetTracker
	dialer  *kafka.Dialer

	mu     sync.Mutex
	reader *kafka.Reader
}

var _ Source = (*KafkaSource)(nil)

// NewKafkaSource validates opts. Run connects.
func NewKafkaSource(opts KafkaOptions) (*KafkaSource, error) {
	if len(opts.Brokers) == 0 {
		return nil, errors.New("ingest: kafka needs at least one broker")
	}
	if len(opts.Topics) == 0 {
		return nil, errors.New("ingest: kafka needs at least one topic")
	}
	if opts.GroupID == "" {
		return nil, errors.New("ingest: kafka needs a group id")
	}
	if opts.CommitInterval <= 0 {
		opts.CommitInterval = 100 * time.Millisecond
	}
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = 2 * time.Second
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = config.DefaultKafkaSessionTimeout
	}
	if opts.RebalanceTimeout <= 0 {
		opts.RebalanceTimeout = opts.SessionTimeout
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = opts.SessionTimeout / 3
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 10 * time.Second
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	s := &KafkaSource{
		opts:    opts,
		log:     opts.Logger.With(zap.String("component", "ingest-kafka")),
		health:  newHealthState(),
		offsets: newOffsetTracker(),
		dialer: &kafka.Dialer{
			ClientID:      "heartbeatd",
			Timeout:       opts.DialTimeout,
			DualStack:     true,
			TLS:           opts.TLS,
			SASLMechanism: opts.SASL,
		},
	}
	s.offsets.onAck = s.health.done
	return s, nil
}

// Name implements Source.
func (s *KafkaSource) Name() string { return SourceKafka }

// Health implements Source. Lag is how long the oldest fetched message has waited for its Redis write
// (a stalled chain), or, while the reader reports messages behind, how old the last fetched record is
// (a backlog being worked off).
func (s *KafkaSource) Health() Health {
	now := time.Now()
	lag := s.offsets.lag(now)
	s.mu.Lock()
	r := s.reader
	s.mu.Unlock()
	if r != nil && r.Lag() > 0 {
		lag = max(lag, s.offsets.recordAge(now))
	}
	return s.health.health(lag)
}

// Run implements Source.
func (s *KafkaSource) Run(ctx context.Context, chain *Chain) error {
	defer s.setConnected(chain, false)
	err := loop.Retry(ctx, loop.RetryOptions{Backoff: loop.Backoff{Min: 200 * time.Millisecond, Max: 10 * time.Second},
		Permanent: permanentKafkaError,
		OnError: func(err error, failures int, _ time.Duration) {
			if failures%10 == 1 {
				s.log.Warn("kafka brokers unreachable; retrying", zap.Int("attempt", failures), zap.Error(err))
			}
		}}, s.probe)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		s.log.Error("kafka connection refused", zap.Error(err))
		return err
	}

	reader := kafka.NewReader(kafka.ReaderConfig{
		Brokers:     s.opts.Brokers,
		GroupID:     s.opts.GroupID,
		GroupTopics: s.opts.Topics,
		Dialer:      s.dialer,
		// Enough prefetched messages to fill a few batches while the previous ones are written.
		QueueCapacity: 1024,
		MinBytes:      1,
		MaxBytes:      8 << 20,
		MaxWait:       500 * time.Millisecond,
		// Commits are ours (commitLoop): synchronous inside kafka-go, and only for applied offsets.
		CommitInterval:        0,
		HeartbeatInterval:     s.opts.HeartbeatInterval,
		SessionTimeout:        s.opts.SessionTimeout,
		RebalanceTimeout:      s.opts.RebalanceTimeout,
		JoinGroupBackoff:      time.Second,
		WatchPartitionChanges: true,
		// A new group starts at the beginning of the retained signals: they are real signals, and
		// replaying one never moves a deadline back.
		StartOffset:    kafka.FirstOffset,
		IsolationLevel: kafka.ReadCommitted,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			s.log.Warn("kafka reader: " + fmt.Sprintf(msg, args...))
		}),
	})
	s.mu.Lock()
	s.reader = reader
	s.mu.Unlock()

	// The committer and the prober outlive ctx: at shutdown the chain may still apply what was fetched,
	// and those offsets should be committed before the reader leaves the group.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.commitLoop(bg, reader) }()
	go func() { defer wg.Done(); s.probeLoop(bg, chain, reader) }()

	s.fetchLoop(ctx, reader, chain)

	if !s.health.waitDrained(s.opts.DrainTimeout) {
		s.log.Warn("shutdown: messages still unapplied; their offsets stay uncommitted and are read again",
			zap.Int64("messages", s.health.outstanding.Load()))
	}
	stopBG()
	wg.Wait()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = s.commit(fctx, reader)
	if err := reader.Close(); err != nil {
		s.log.Warn("kafka reader close", zap.Error(err))
	}
	return nil
}

func (s *KafkaSource) fetchLoop(ctx context.Context, reader *kafka.Reader, chain *Chain) {
	backoff := loop.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for {
		m, err := reader.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("kafka fetch failed", zap.Error(err))
			if !loop.Sleep(ctx, backoff.Next()) {
				return
			}
			continue
		}
		backoff.Reset()
		ack := s.offsets.add(m.Topic, m.Partition, m.Offset, m.Time)
		s.health.begin()
		err = chain.Submit(ctx, Message{
			Source:  SourceKafka,
			Topic:   m.Topic,
			Key:     m.Key,
			Payload: m.Value,
			Ack:     ack,
		})
		if err != nil {
			s.health.done() // never applied: its offset stays uncommitted
			return
		}
	}
}

// commitLoop commits what became committable, at most once per CommitInterval.
func (s *KafkaSource) commitLoop(ctx context.Context, reader *kafka.Reader) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.offsets.ready:
		}
		if err := s.commit(ctx, reader); err != nil && ctx.Err() == nil {
			s.log.Warn("kafka offset commit failed; retrying", zap.Error(err))
			s.offsets.signal()
		}
		if !loop.Sleep(ctx, s.opts.CommitInterval) {
			return
		}
	}
}

func (s *KafkaSource) commit(ctx context.Context, reader *kafka.Reader) error {
	offs := s.offsets.committable()
	if len(offs) == 0 {
		return nil
	}
	msgs := make([]kafka.Message, 0, len(offs))
	for tp, off := range offs {
		// kafka-go commits Offset+1: the next message to read.
		msgs = append(msgs, kafka.Message{Topic: tp.topic, Partition: tp.partition, Offset: off})
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := reader.CommitMessages(cctx, msgs...); err != nil {
		return fmt.Errorf("ingest: kafka commit: %w", err)
	}
	s.offsets.committed(offs)
	return nil
}

// joinPoll is how often a reader that has not joined its group yet is asked whether it has.
const joinPoll = 50 * time.Millisecond

// probeLoop reports the source connected while the brokers answer and the reader has joined its consumer
// group. Joining is not immediate: after a restart the coordinator keeps the partitions with the previous
// process until its session times out (ingest.kafka.session_timeout), and until then nothing is read.
// Reporting that time as connected would let detection run on deadlines that the unread signals would
// have moved; reported as an outage, hold-back covers it.
func (s *KafkaSource) probeLoop(ctx context.Context, chain *Chain, reader *kafka.Reader) {
	t := time.NewTicker(joinPoll)
	defer t.Stop()
	joined, reachable := false, true // Run probed the brokers just before
	started := time.Now()
	lastProbe := started
	s.log.Info("waiting for the consumer group to assign partitions", zap.String("group_id", s.opts.GroupID))
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !joined && reader.Stats().Rebalances > 0 {
			joined = true
			s.log.Info("joined the consumer group", zap.String("group_id", s.opts.GroupID),
				zap.Duration("after", time.Since(started).Round(time.Millisecond)))
			t.Reset(s.opts.ProbeInterval)
		}
		if time.Since(lastProbe) >= s.opts.ProbeInterval {
			lastProbe = time.Now()
			err := s.probe(ctx)
			if ctx.Err() != nil {
				return
			}
			if up := err == nil; up != reachable {
				reachable = up
				if err != nil {
					s.log.Warn("kafka brokers unreachable", zap.Error(err))
				} else {
					s.log.Info("kafka brokers reachable again")
				}
			}
		}
		s.setConnected(chain, reachable && joined)
	}
}

func (s *KafkaSource) setConnected(chain *Chain, up bool) bool {
	chain.setConnected(SourceKafka, up) // gauge first, as in MQTTSource.setConnected
	return s.health.set(up)
}

// probe connects the way the reader does (TLS, SASL) and reads the partitions of the signal topics.
// The reader itself retries silently forever; this is what tells Health, and the first contact, whether
// the brokers can be used at all.
func (s *KafkaSource) probe(ctx context.Context) error {
	var errs []error
	for _, b := range s.opts.Brokers {
		err := s.probeBroker(ctx, b)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("ingest: kafka broker %s: %w", b, err))
	}
	return errors.Join(errs...)
}

func (s *KafkaSource) probeBroker(ctx context.Context, broker string) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.DialTimeout)
	defer cancel()
	conn, err := s.dialer.DialContext(ctx, "tcp", broker)
	if err != nil {
		return err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	parts, err := conn.ReadPartitions(s.opts.Topics...)
	if err != nil {
		return err
	}
	seen := make(map[string]bool, len(s.opts.Topics))
	for _, p := range parts {
		seen[p.Topic] = true
	}
	var missing []string
	for _, t := range s.opts.Topics {
		if !seen[t] {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("topics %s: %w", strings.Join(missing, ","), kafka.UnknownTopicOrPartition)
	}
	return nil
}

// permanentKafkaError reports whether a connection error is a configuration problem that retrying cannot
// fix: refused credentials, a missing permission, a certificate that does not verify.
func permanentKafkaError(err error) bool {
	for _, e := range []kafka.Error{
		kafka.SASLAuthenticationFailed, kafka.UnsupportedSASLMechanism, kafka.IllegalSASLState,
		kafka.TopicAuthorizationFailed, kafka.GroupAuthorizationFailed, kafka.ClusterAuthorizationFailed,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	if strings.Contains(err.Error(), "SCRAM") {
		return true // pkg/event's SCRAM client: the broker does not know our credentials
	}
	return certificateError(err)
}
