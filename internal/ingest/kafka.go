package ingest

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/defaults"
	"github.com/heartbeatd/heartbeatd/internal/holdback"
	"github.com/heartbeatd/heartbeatd/internal/loop"
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
	// HeartbeatInterval defaults to a tenth of the session (kafka-go's and Kafka's own ratio): a member
	// learns that a rebalance began only at its next heartbeat, so this is how long a dead member's
	// partitions wait for the others after the coordinator expelled it.
	SessionTimeout    time.Duration
	RebalanceTimeout  time.Duration
	HeartbeatInterval time.Duration
	// DialTimeout bounds one connection attempt (default 10s).
	DialTimeout time.Duration
	// DrainTimeout is how long Run waits at shutdown for the messages it submitted to be applied, so
	// their offsets can be committed (default 5s).
	DrainTimeout time.Duration
	// Member tags this process's membership of the group (in its member metadata), so the other
	// replicas can tell when the group has let go of it (TakenOver); "" = untagged, and Shares is empty.
	Member string
	// WatchInterval is how often the whole group is observed: end offsets against committed ones, its
	// state and members (default 500ms). A lag is seen at most this much later than it began.
	WatchInterval time.Duration
	// Now is the clock the group's lag and blind spots are measured on: the one the replicas share
	// (default time.Now).
	Now    func() time.Time
	Logger *zap.Logger
}

// KafkaSource reads the signal topics as a consumer group and commits a partition's offset only past
// messages whose deadline write Redis acknowledged.
type KafkaSource struct {
	opts      KafkaOptions
	log       *zap.Logger
	health    *healthState
	offsets   *offsetTracker
	dialer    *kafka.Dialer
	client    *kafka.Client // the group watch's requests, over transport
	transport *kafka.Transport
	watch     *groupWatch
	align     *aligner

	// generation is the group's current one (nil before the first), which commits go through;
	// generations counts those started, observedGenerations the count the group watch last folded in.
	generation          atomic.Pointer[kafka.Generation]
	generations         atomic.Int64
	observedGenerations atomic.Int64
	// own is this replica's assignment while a generation runs: it is ready once it reads these in
	// time. unassignedSince (Unix ns on Now's clock) is when it last had none; 0 while it has one.
	own             atomic.Pointer[assignment]
	unassignedSince atomic.Int64
	// rebalancing: the replica had an assignment and its generation ended; false before the first.
	rebalancing atomic.Bool
}

var (
	_ Source  = (*KafkaSource)(nil)
	_ Sharing = (*KafkaSource)(nil)
)

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
	opts.CommitInterval = defaults.Positive(opts.CommitInterval, 100*time.Millisecond)
	opts.ProbeInterval = defaults.Positive(opts.ProbeInterval, 2*time.Second)
	opts.SessionTimeout = defaults.Positive(opts.SessionTimeout, config.DefaultKafkaSessionTimeout)
	opts.RebalanceTimeout = defaults.Positive(opts.RebalanceTimeout, opts.SessionTimeout)
	opts.HeartbeatInterval = defaults.Positive(opts.HeartbeatInterval, opts.SessionTimeout/10)
	opts.DialTimeout = defaults.Positive(opts.DialTimeout, 10*time.Second)
	opts.DrainTimeout = defaults.Positive(opts.DrainTimeout, 5*time.Second)
	opts.WatchInterval = defaults.Positive(opts.WatchInterval, 500*time.Millisecond)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Logger = cmp.Or(opts.Logger, zap.NewNop())
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
		transport: &kafka.Transport{DialTimeout: opts.DialTimeout, ClientID: "heartbeatd", TLS: opts.TLS, SASL: opts.SASL,
			MetadataTopics: opts.Topics},
		watch: newGroupWatch(opts.Now),
		align: newSourceAligner(),
	}
	s.client = &kafka.Client{Addr: kafka.TCP(opts.Brokers...), Timeout: opts.DialTimeout, Transport: s.transport}
	s.offsets.onAck = s.health.done
	s.unassignedSince.Store(opts.Now().UnixNano()) // no partition is read before the group assigns some
	return s, nil
}

// Name implements Source.
func (s *KafkaSource) Name() string { return SourceKafka }

// Shares implements Sharing: the group's partitions are split among the replicas in it.
func (s *KafkaSource) Shares() []holdback.Share {
	if s.opts.Member == "" {
		return nil
	}
	topics := slices.Sorted(slices.Values(s.opts.Topics))
	return []holdback.Share{{Name: "kafka:" + s.opts.GroupID, Signals: "kafka:" + strings.Join(topics, ","), Member: s.opts.Member,
		// The coordinator expels a silent member a session timeout after its last heartbeat, then waits
		// up to the rebalance timeout for the others to rejoin.
		Release: s.opts.SessionTimeout + s.opts.HeartbeatInterval + s.opts.RebalanceTimeout, Kept: true}}
}

// ReadUpTo is the time up to which the whole group has read every partition, on Now's clock (zero until
// the group was observed): where a lag began, before it is long enough to count.
func (s *KafkaSource) ReadUpTo() time.Time { return s.watch.readUpTo() }

// TakenOver implements Sharing: the group is stable without member and has read every partition past
// since.
func (s *KafkaSource) TakenOver(member string, since time.Time) bool {
	return s.watch.takenOver(member, since)
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

	group, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                    s.opts.GroupID,
		Brokers:               s.opts.Brokers,
		Dialer:                s.dialer,
		Topics:                s.opts.Topics,
		GroupBalancers:        s.balancers(),
		HeartbeatInterval:     s.opts.HeartbeatInterval,
		SessionTimeout:        s.opts.SessionTimeout,
		RebalanceTimeout:      s.opts.RebalanceTimeout,
		JoinGroupBackoff:      time.Second,
		WatchPartitionChanges: true,
		// A new group starts at the beginning of the retained signals: they are real signals, and
		// replaying one never moves a deadline back.
		StartOffset: kafka.FirstOffset,
		Timeout:     s.opts.DialTimeout,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			s.log.Warn("kafka consumer group: " + fmt.Sprintf(msg, args...))
		}),
	})
	if err != nil {
		return fmt.Errorf("ingest: kafka consumer group: %w", err)
	}
	// The committer, the prober and the group watch outlive ctx: at shutdown the chain may still apply
	// what was fetched, and those offsets should be committed before the group is left.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { s.commitLoop(bg) })
	wg.Go(func() { s.probeLoop(bg, chain) })
	wg.Go(func() { s.watchLoop(bg) })

	s.consume(ctx, group, chain)

	if !s.health.waitDrained(s.opts.DrainTimeout) {
		s.log.Warn("shutdown: messages still unapplied; their offsets stay uncommitted and are read again",
			zap.Int64("messages", s.health.outstanding.Load()))
	}
	stopBG()
	wg.Wait()
	if err := s.commit(); err != nil {
		s.log.Warn("shutdown: last offset commit failed; the messages after the last commit are read again", zap.Error(err))
	}
	// Closing the group ends its generation (the partition readers return) and leaves the group.
	if err := group.Close(); err != nil {
		s.log.Warn("kafka consumer group close", zap.Error(err))
	}
	s.transport.CloseIdleConnections()
	return nil
}

// commitLoop commits what became committable, at most once per CommitInterval.
func (s *KafkaSource) commitLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.offsets.ready:
		}
		if err := s.commit(); err != nil && ctx.Err() == nil {
			s.log.Warn("kafka offset commit failed; retrying", zap.Error(err))
			s.offsets.signal()
		}
		if !loop.Sleep(ctx, s.opts.CommitInterval) {
			return
		}
	}
}

// commit commits the applied offsets with the current generation. A partition another member owns by
// now may be committed too: only applied offsets are, so at worst its new owner reads a few again.
func (s *KafkaSource) commit() error {
	gen := s.generation.Load()
	if gen == nil {
		return nil
	}
	offs := s.offsets.committable()
	if len(offs) == 0 {
		return nil
	}
	byTopic := map[string]map[int]int64{}
	for tp, off := range offs {
		if byTopic[tp.topic] == nil {
			byTopic[tp.topic] = map[int]int64{}
		}
		byTopic[tp.topic][tp.partition] = off + 1 // Kafka's committed offset is the next one to read
	}
	// CommitOffsets takes no context: the group's Timeout bounds it.
	if err := gen.CommitOffsets(byTopic); err != nil {
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
func (s *KafkaSource) probeLoop(ctx context.Context, chain *Chain) {
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
		if !joined && s.generations.Load() > 0 {
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

// balancers are kafka-go's default ones, with Member in this process's member metadata.
func (s *KafkaSource) balancers() []kafka.GroupBalancer {
	bs := []kafka.GroupBalancer{kafka.RangeGroupBalancer{}, kafka.RoundRobinGroupBalancer{}}
	if s.opts.Member != "" {
		for i, b := range bs {
			bs[i] = taggedBalancer{GroupBalancer: b, tag: []byte(s.opts.Member)}
		}
	}
	return bs
}

// taggedBalancer carries a member tag as its user data, which DescribeGroups shows every replica. The
// range and round-robin balancers use no user data of their own.
type taggedBalancer struct {
	kafka.GroupBalancer
	tag []byte
}

func (b taggedBalancer) UserData() ([]byte, error) { return b.tag, nil }

// watchLoop observes the group every WatchInterval until ctx ends (groupWatch).
func (s *KafkaSource) watchLoop(ctx context.Context) {
	loop.Every(ctx, loop.Options{Interval: s.opts.WatchInterval, Immediate: true, MaxBackoff: 4 * s.opts.WatchInterval,
		OnError: func(err error, failures int, _ time.Duration) {
			if failures%20 == 1 {
				s.log.Warn("cannot observe the consumer group; its lag and rebalances are unknown meanwhile",
					zap.String("group_id", s.opts.GroupID), zap.Int("attempt", failures), zap.Error(err))
			}
		}},
		func(ctx context.Context) error {
			err := s.observe(ctx)
			if err != nil {
				s.watch.failed(err)
			}
			return err
		})
}

// maxRecordFetches bounds the records one observation reads to learn the age of a backlog.
const maxRecordFetches = 16

// observe reads the group's committed offsets, then (from the observation's time on) its state and
// members and every partition's end offset, and folds them into the watch: reading the committed
// offsets first and the end offsets last only ever makes the group look further behind.
func (s *KafkaSource) observe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.DialTimeout)
	defer cancel()
	md, err := s.client.Metadata(ctx, &kafka.MetadataRequest{Topics: s.opts.Topics})
	if err != nil {
		return fmt.Errorf("ingest: kafka metadata: %w", err)
	}
	parts := map[string][]int{}
	for _, t := range md.Topics {
		if t.Error != nil {
			return fmt.Errorf("ingest: kafka topic %s: %w", t.Name, t.Error)
		}
		for _, p := range t.Partitions {
			parts[t.Name] = append(parts[t.Name], p.ID)
		}
	}
	of, err := s.client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: s.opts.GroupID, Topics: parts})
	if err == nil {
		err = of.Error
	}
	if err != nil {
		return fmt.Errorf("ingest: kafka committed offsets: %w", err)
	}
	o := observation{at: s.opts.Now(), ends: map[topicPartition]int64{}, committed: map[topicPartition]int64{}}
	if o.state, o.tags, err = s.describeGroup(ctx); err != nil {
		return err
	}
	// Counted after the description: a rebalance over before it was described shows as Stable, and only
	// this reader's new generation tells of it. Marked seen only once folded, so a failed observation
	// leaves it to the next.
	generations := s.generations.Load()
	o.rebalanced = generations != s.observedGenerations.Load()
	req := map[string][]kafka.OffsetRequest{}
	for topic, ps := range parts {
		committed := map[int]int64{}
		for _, p := range of.Topics[topic] {
			if p.Error != nil {
				return fmt.Errorf("ingest: kafka committed offset of %s/%d: %w", topic, p.Partition, p.Error)
			}
			committed[p.Partition] = p.CommittedOffset
		}
		for _, p := range ps {
			c, ok := committed[p]
			if !ok {
				c = -1
			}
			o.committed[topicPartition{topic, p}] = c
			req[topic] = append(req[topic], kafka.LastOffsetOf(p))
			if c < 0 {
				// Nothing committed yet: the reader starts at the first retained record.
				req[topic] = append(req[topic], kafka.FirstOffsetOf(p))
			}
		}
	}
	lo, err := s.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: req, IsolationLevel: kafka.ReadCommitted})
	if err != nil {
		return fmt.Errorf("ingest: kafka end offsets: %w", err)
	}
	for topic, ps := range lo.Topics {
		for _, p := range ps {
			if p.Error != nil {
				return fmt.Errorf("ingest: kafka end offset of %s/%d: %w", topic, p.Partition, p.Error)
			}
			tp := topicPartition{topic, p.Partition}
			o.ends[tp] = p.LastOffset
			if o.committed[tp] < 0 {
				o.committed[tp] = p.FirstOffset
			}
		}
	}
	s.watch.fold(o)
	s.observedGenerations.Store(generations)
	s.fetchRecordTimes(ctx)
	return nil
}

// describeGroup is the consumer group's state and its members' tags.
func (s *KafkaSource) describeGroup(ctx context.Context) (state string, tags map[string]bool, err error) {
	dg, err := s.client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{s.opts.GroupID}})
	if err == nil && len(dg.Groups) != 1 {
		err = fmt.Errorf("%d groups described", len(dg.Groups))
	}
	if err == nil {
		err = dg.Groups[0].Error
	}
	if err != nil {
		return "", nil, fmt.Errorf("ingest: kafka describe group: %w", err)
	}
	tags = map[string]bool{}
	for _, m := range dg.Groups[0].Members {
		tags[string(m.MemberMetadata.UserData)] = true
	}
	return dg.Groups[0].GroupState, tags, nil
}

// fetchRecordTimes reads the oldest unread record of partitions that were behind before the first
// observation, for its timestamp: the only clue to how long such a backlog has waited. A failure leaves
// the backlog's age counted from the first observation.
func (s *KafkaSource) fetchRecordTimes(ctx context.Context) {
	n := 0
	for tp, off := range s.watch.needRecordTimes() {
		if n++; n > maxRecordFetches {
			return
		}
		res, err := s.client.Fetch(ctx, &kafka.FetchRequest{Topic: tp.topic, Partition: tp.partition, Offset: off,
			MinBytes: 1, MaxBytes: 64 << 10, IsolationLevel: kafka.ReadCommitted})
		if err != nil || res.Error != nil || res.Records == nil {
			continue
		}
		if r, err := res.Records.ReadRecord(); err == nil {
			s.watch.recordTime(tp, off, r.Time)
		}
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
