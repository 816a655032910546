// Package eventkafka publishes heartbeatd's events and dead letters (pkg/event) to Kafka through kafka-go.
//
// It is apart from pkg/event so that a consumer importing pkg/event to decode events does not link a
// Kafka client and a logger. The alarm and ingest packages depend only on event.Sink and
// event.DeadLetterSink; the daemon wires a Publisher in.
package eventkafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// PublisherOptions configures a Publisher (config: events.kafka).
type PublisherOptions struct {
	Brokers         []string
	Topic           string // events; required
	DeadLetterTopic string // dead letters; PublishDeadLetter fails when empty
	// Topics says whether EnsureTopics creates the two topics when missing, and how.
	Topics TopicCreation
	// Source is every event's CloudEvents source, its ce_source header: CloudEventsSource of
	// redis.key_prefix, so consumers of one topic tell deployments apart. Default: that of the default
	// key prefix.
	Source string
	TLS    *tls.Config
	SASL   sasl.Mechanism // heartbeatd builds it with internal/kafkaclient
	// BatchTimeout is how long the writer waits for a partition's batch to fill. kafka-go waits the whole
	// of it whenever a batch does not fill, which is nearly every synchronous publish, so it is pure added
	// latency; a Publish adds all its messages at once and needs no waiting to batch them. Default 10µs:
	// measured into kfake (BenchmarkPublish), a 256-event Publish takes 1.1 ms at 10µs against 2.4 ms at
	// 1 ms, a single event 0.3 ms against 1.3 ms, and throughput is no lower.
	BatchTimeout time.Duration
	// WriteTimeout bounds one Publish call (all attempts) and each produce request. Default 10s.
	WriteTimeout time.Duration
	Logger       *zap.Logger
}

// Publisher writes events and dead letters to Kafka through one kafka-go Writer. Safe for concurrent use.
type Publisher struct {
	w      *kafka.Writer
	t      *kafka.Transport
	opts   PublisherOptions
	log    *zap.Logger
	addr   net.Addr
	probeT time.Duration
	// fixed are the headers every event message shares, built once; kafka-go only reads them.
	fixed [3]kafka.Header
}

// CloudEvents Kafka protocol binding, binary content mode: the event's attributes travel as ce_*
// headers and its data is the message value, so tooling routes events without decoding them
// (api/event-headers.schema.json).
const (
	// cloudEventsTypePrefix + kind is an event's ce_type.
	cloudEventsTypePrefix = "heartbeatd."
	cloudEventsSpec       = "1.0"
	contentTypeJSON       = "application/json"
	// eventHeaders is how many headers an event message carries: Publisher.fixed, then ce_id, ce_type
	// and ce_time.
	eventHeaders = 6
)

// CloudEventsSource is the ce_source of the events of the deployment with Redis key prefix keyPrefix:
// /heartbeatd/<key_prefix>, the prefix escaped as a URI path segment.
func CloudEventsSource(keyPrefix string) string {
	return "/heartbeatd/" + url.PathEscape(keyPrefix)
}

var (
	_ event.Sink           = (*Publisher)(nil)
	_ event.DeadLetterSink = (*Publisher)(nil)
)

// NewPublisher builds a publisher. It does not connect: Ready tells whether the brokers answer.
func NewPublisher(opts PublisherOptions) (*Publisher, error) {
	if len(opts.Brokers) == 0 {
		return nil, errors.New("event: publisher needs at least one broker")
	}
	if opts.Topic == "" {
		return nil, errors.New("event: publisher needs an events topic")
	}
	if opts.BatchTimeout <= 0 {
		opts.BatchTimeout = 10 * time.Microsecond
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Source == "" {
		opts.Source = CloudEventsSource(config.DefaultKeyPrefix)
	}
	log := opts.Logger.With(zap.String("component", "event-publisher"))
	t := newTransport(opts)
	addr := kafka.TCP(opts.Brokers...)
	w := &kafka.Writer{
		Addr: addr,
		// No Writer.Topic: each message names its topic, so events and dead letters share one
		// connection pool.
		//
		// The Java client's default partitioner (murmur2 of the key), so every producer of this topic —
		// replicas, other tools — puts a device's events on the same partition and per-device order holds.
		Balancer:     &kafka.Murmur2Balancer{},
		RequiredAcks: kafka.RequireAll, // an acknowledged event survives the loss of the partition leader
		// Large enough that one Publish of a wake-up's claims usually goes out as one produce request per
		// partition. Not larger: kafka-go preallocates (and zeroes) BatchSize messages (~150 B each) for
		// every batch of every partition a Publish touches; at 1000 that zeroing was 9% of the detection
		// path's CPU at 1M deadlines over 10 s, where a Publish carries ≈ 20 events per partition.
		BatchSize:    256,
		BatchTimeout: opts.BatchTimeout,
		WriteTimeout: opts.WriteTimeout,
		// Retries inside one Publish are cheap insurance against a leader move; Publish's own deadline
		// still bounds them, and the alarm loop retries whatever stays unacknowledged after its lease.
		MaxAttempts:     5,
		WriteBackoffMin: 50 * time.Millisecond,
		WriteBackoffMax: 500 * time.Millisecond,
		// Topics are provisioned by the operator; a typo must not create a stray topic that nobody reads.
		AllowAutoTopicCreation: false,
		// Every failure reaches the caller of Publish and is logged once there; kafka-go's own
		// per-attempt lines would repeat it many times over during an outage.
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			if ce := log.Check(zap.DebugLevel, "kafka-go"); ce != nil {
				ce.Write(zap.String("detail", fmt.Sprintf(msg, args...)))
			}
		}),
		Transport: t,
	}
	return &Publisher{w: w, t: t, opts: opts, log: log, addr: addr, probeT: min(opts.WriteTimeout, 5*time.Second),
		fixed: [3]kafka.Header{
			{Key: "ce_specversion", Value: []byte(cloudEventsSpec)},
			{Key: "ce_source", Value: []byte(opts.Source)},
			{Key: "content-type", Value: []byte(contentTypeJSON)},
		}}, nil
}

func newTransport(opts PublisherOptions) *kafka.Transport {
	topics := []string{opts.Topic}
	if opts.DeadLetterTopic != "" {
		topics = append(topics, opts.DeadLetterTopic)
	}
	return &kafka.Transport{
		DialTimeout: min(opts.WriteTimeout, 5*time.Second),
		ClientID:    "heartbeatd",
		TLS:         opts.TLS,
		SASL:        opts.SASL,
		// Only our topics: the default refreshes metadata for every topic of the cluster every few seconds.
		MetadataTopics: topics,
	}
}

// Publish writes the events to the events topic, key = device id, value = the docs/events.md JSON, with the
// CloudEvents headers, and waits until they are acknowledged or the write timeout passes. The result is
// aligned with events: nil where the event was delivered. An event reported failed may still arrive
// later (a cancelled write is not recalled); that is the at-least-once duplicate the event id lets
// consumers drop.
func (p *Publisher) Publish(ctx context.Context, events []event.Event) []error {
	if len(events) == 0 {
		return nil
	}
	errs := make([]error, len(events))
	msgs := make([]kafka.Message, 0, len(events))
	idx := make([]int, 0, len(events)) // msgs[j] carries events[idx[j]]
	// Every message's headers and the bytes of its key and per-event header values come from two
	// allocations for the whole call instead of a few per event. Each message keeps slices of them;
	// should an append outgrow the estimate, the slices taken before still hold their bytes.
	headers := make([]kafka.Header, 0, eventHeaders*len(events))
	size := 0
	for _, e := range events {
		size += len(e.DeviceID) + len(e.ID) + len(cloudEventsTypePrefix) + len(e.Kind) + len("2006-01-02T15:04:05.000Z")
	}
	arena := make([]byte, 0, size)
	// The events of one call mostly share their kind and their at (one wake-up's decisions): their
	// header values are shared too.
	var typ, at []byte
	var lastKind event.Kind
	var lastAt time.Time
	for i, e := range events {
		if e.DeviceID == "" {
			errs[i] = fmt.Errorf("event: publish: %w: event without device id", errRefused)
			continue
		}
		value, err := e.MarshalJSON()
		if err != nil {
			errs[i] = fmt.Errorf("event: publish: %w: encode %s: %w", errRefused, e.ID, err)
			continue
		}
		var key, id []byte
		key, arena = appendTo(arena, e.DeviceID)
		id, arena = appendTo(arena, e.ID)
		if typ == nil || e.Kind != lastKind {
			typ, arena = appendTo(arena, cloudEventsTypePrefix, string(e.Kind))
			lastKind = e.Kind
		}
		if at == nil || !e.At.Equal(lastAt) {
			start := len(arena)
			arena = event.AppendTime(arena, e.At)
			at, lastAt = arena[start:len(arena):len(arena)], e.At
		}
		h := len(headers)
		headers = append(headers, p.fixed[:]...)
		headers = append(headers, kafka.Header{Key: "ce_id", Value: id}, kafka.Header{Key: "ce_type", Value: typ},
			kafka.Header{Key: "ce_time", Value: at})
		msgs = append(msgs, kafka.Message{Topic: p.opts.Topic, Key: key, Value: value, Time: e.At,
			Headers: headers[h:len(headers):len(headers)]})
		idx = append(idx, i)
	}
	for j, err := range p.write(ctx, p.opts.Topic, msgs) {
		errs[idx[j]] = err
	}
	return errs
}

// appendTo appends the strings to arena and returns their bytes, capped: appending to them cannot spill
// into the next.
func appendTo(arena []byte, strs ...string) (part, grown []byte) {
	start := len(arena)
	for _, s := range strs {
		arena = append(arena, s...)
	}
	return arena[start:len(arena):len(arena)], arena
}

// PublishDeadLetter writes one dead letter to the dead-letter topic.
func (p *Publisher) PublishDeadLetter(ctx context.Context, d event.DeadLetter) error {
	return p.PublishDeadLetters(ctx, []event.DeadLetter{d})[0]
}

// PublishDeadLetters writes dead letters in one round trip; the result is aligned with the input. The
// message key is the input's own key when it had one (a device's bad input stays together), else none.
func (p *Publisher) PublishDeadLetters(ctx context.Context, ds []event.DeadLetter) []error {
	if len(ds) == 0 {
		return nil
	}
	errs := make([]error, len(ds))
	if p.opts.DeadLetterTopic == "" {
		for i := range errs {
			errs[i] = errors.New("event: no dead-letter topic configured")
		}
		return errs
	}
	msgs := make([]kafka.Message, 0, len(ds))
	idx := make([]int, 0, len(ds))
	for i, d := range ds {
		value, err := d.MarshalJSON()
		if err != nil {
			errs[i] = fmt.Errorf("event: dead letter: encode: %w", err)
			continue
		}
		var key []byte
		if len(d.Key) > 0 {
			key = d.Key
		}
		msgs = append(msgs, kafka.Message{Topic: p.opts.DeadLetterTopic, Key: key, Value: value, Time: d.At})
		idx = append(idx, i)
	}
	for j, err := range p.write(ctx, p.opts.DeadLetterTopic, msgs) {
		errs[idx[j]] = err
	}
	return errs
}

// errRefused is wrapped by the errors of events Kafka refused for their content (too large, invalid,
// corrupt, a timestamp the topic does not accept) or that could not be encoded: sending the same bytes
// again cannot succeed. Every other failure (Kafka unreachable, timing out, short of in-sync replicas,
// a leader moving, authorisation) says nothing about the event and may pass.
var errRefused = errors.New("kafka refused the event")

// Refused reports whether err is a refusal of the event itself (errRefused); alarm.HandlerOptions.Refused.
func Refused(err error) bool { return errors.Is(err, errRefused) }

// refusedCodes are the Kafka error codes about a message's own content. RecordListTooLarge and
// MessageSizeTooLarge may be about a whole batch (a topic whose max.message.bytes is below kafka-go's
// batch size): write sends such messages again one at a time before it believes them.
var refusedCodes = map[kafka.Error]bool{
	kafka.InvalidMessage:      true, // CORRUPT_MESSAGE
	kafka.MessageSizeTooLarge: true,
	kafka.RecordListTooLarge:  true,
	kafka.InvalidTimestamp:    true,
	kafka.InvalidRecord:       true,
}

// refusal wraps err with errRefused when Kafka refused the message for its content.
func refusal(err error) error {
	var code kafka.Error
	var tooLarge kafka.MessageTooLargeError
	if (errors.As(err, &code) && refusedCodes[code]) || errors.As(err, &tooLarge) {
		return fmt.Errorf("%w: %w", errRefused, err)
	}
	return err
}

// write sends msgs in one WriteMessages call (the fast path: one produce request per partition) and
// maps the outcome onto each message. Messages refused as part of a larger write are sent again one at
// a time, so one poison event (or a batch larger than the topic takes) never condemns its neighbours.
func (p *Publisher) write(ctx context.Context, topic string, msgs []kafka.Message) []error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.WriteTimeout)
	defer cancel()
	errs := p.writeOnce(ctx, topic, msgs)
	if len(msgs) < 2 {
		return errs
	}
	for i, err := range errs {
		if err != nil && Refused(err) && ctx.Err() == nil {
			errs[i] = p.writeOnce(ctx, topic, msgs[i:i+1])[0]
		}
	}
	return errs
}

// writeOnce is one WriteMessages call of msgs, its outcome per message.
func (p *Publisher) writeOnce(ctx context.Context, topic string, msgs []kafka.Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	err := p.w.WriteMessages(ctx, msgs...)
	if err == nil {
		return errs
	}
	var werrs kafka.WriteErrors
	if errors.As(err, &werrs) && len(werrs) == len(msgs) {
		failed := 0
		for i, e := range werrs {
			if e != nil {
				errs[i] = fmt.Errorf("event: publish to %s: %w", topic, refusal(e))
				failed++
			}
		}
		p.log.Warn("publish failed", zap.String("topic", topic), zap.Int("failed", failed),
			zap.Int("messages", len(msgs)), zap.Error(werrs[firstNonNil(werrs)]))
		return errs
	}
	var tooLarge kafka.MessageTooLargeError
	if errors.As(err, &tooLarge) && len(msgs) > 1 {
		// kafka-go checks sizes before sending anything: the other messages were not refused, only
		// not sent. write sends each of them again on its own.
		err = fmt.Errorf("event: publish to %s: %w", topic, refusal(err))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	// Anything else (no metadata, unknown topic, closed writer, deadline) happened before or instead of
	// the per-partition writes: nothing can be counted as delivered.
	err = fmt.Errorf("event: publish to %s: %w", topic, refusal(err))
	for i := range errs {
		errs[i] = err
	}
	p.log.Warn("publish failed", zap.String("topic", topic), zap.Int("messages", len(msgs)), zap.Error(err))
	return errs
}

func firstNonNil(errs []error) int {
	for i, e := range errs {
		if e != nil {
			return i
		}
	}
	return 0
}

// Ready probes the brokers the way a new producer would: dial (TLS, SASL) and fetch the metadata of the
// events and dead-letter topics, each of which must exist: a missing one is a *MissingTopicsError naming
// the command that creates it. It uses a connection of its own. Meant for /readyz.
func (p *Publisher) Ready(ctx context.Context) error {
	_, err := p.ensureTopics(ctx, false) // EnsureTopics with creation off: the same probe (topics.go)
	return err
}

// Close flushes what is in flight and releases the connections. Publish after Close fails.
func (p *Publisher) Close() error {
	err := p.w.Close()
	// The writer closes only a transport it made itself; ours it leaves open.
	p.t.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("event: close publisher: %w", err)
	}
	return nil
}
