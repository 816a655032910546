package ingest

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/internal/mqttutil"
)

// Subscription is one MQTT topic template, as configured (ingest.mqtt.subscriptions): levels
// {device_id} and {device_type} of its Topic are placeholders, one level each.
type Subscription = config.Subscription

// MQTTOptions configures the MQTT source (config: ingest.mqtt).
type MQTTOptions struct {
	Brokers  []string // tcp://, mqtt://, ssl://, tls://, mqtts://
	ClientID string   // fixed and one per replica: the broker keeps the session under it
	Username string
	Password string
	// TLS is used for ssl://, tls:// and mqtts:// brokers; nil means the system roots.
	TLS           *tls.Config
	QoS           byte // 1 by default in the config; 0 loses signals on any disconnect
	Subscriptions []Subscription
	// ConnectTimeout bounds one connection attempt (default 10s); KeepAlive is the MQTT keep-alive
	// (default 30s); MaxReconnectInterval caps the reconnect backoff (default 10s).
	ConnectTimeout       time.Duration
	KeepAlive            time.Duration
	MaxReconnectInterval time.Duration
	// DrainTimeout is how long Run waits at shutdown for the messages it submitted to be acknowledged
	// (default 5s). What is not acknowledged by then is delivered again from the persistent session (a
	// shared subscription's clean session loses it).
	DrainTimeout time.Duration
	// MaxQueuedQoS0 bounds the QoS 0 messages waiting for the chain (default 4096, and at most
	// maxQueuedQoS0Bytes of payload). Nothing acknowledges a QoS 0 message, so the broker never stops
	// sending them: past the bound they are shed (signals_total{result="shed"}) instead of piling up in
	// memory while Redis is slow. QoS 1 and 2 messages are bounded by the broker's in-flight window
	// instead, since each waits unacknowledged for its Redis write.
	MaxQueuedQoS0 int
	// ProbeTopic, when set, is where the source publishes its probe (mqttprobe.go) every ProbeEvery
	// (default 1s); ProbeLate is how late a signal may be (default 2s, ingest.max_lag).
	ProbeTopic string
	ProbeEvery time.Duration
	ProbeLate  time.Duration
	// Now is the clock the replicas share, for TakenOver and the probe (default time.Now).
	Now    func() time.Time
	Logger *zap.Logger
}

// maxQueuedQoS0Bytes bounds the payload bytes of the queued QoS 0 messages: a broker may accept payloads
// of hundreds of MiB.
const maxQueuedQoS0Bytes = 16 << 20

// queuedAcked is the room for QoS 1 and 2 messages between paho and the workers. The broker's in-flight
// window (mosquitto max_inflight_messages; the docs advise about 1000) keeps it from filling; only a
// broker without a window fills it, and then paho's reader waits for room.
const queuedAcked = 4096

// MQTTSource subscribes to the fleet's topics with QoS 1, and acknowledges each message only when the
// chain says its deadline was written. Its session is persistent unless a subscription is shared.
type MQTTSource struct {
	opts      MQTTOptions
	templates []topicTemplate
	log       *zap.Logger
	health    *healthState
	pending   pendingArrivals // the messages handed on and not yet acknowledged: Health's Lag
	probe     *mqttProbe      // nil without ProbeTopic

	mu     sync.Mutex
	client mqtt.Client
	chain  *Chain
	ctx    context.Context

	// acked and unacked hand messages from paho to the workers: QoS 1/2 and QoS 0. The handler never
	// waits for the chain, so paho's reader keeps answering keep-alives while Redis is slow.
	acked, unacked chan arrival
	unackedBytes   atomic.Int64
	lastShedLog    atomic.Int64 // Unix ns
	warnedWindow   atomic.Bool

	takeovers  map[string]*takeover // by dead member's client id; guarded by mu
	ended      bool                 // Run is over: no more takeovers; guarded by mu
	takingOver sync.WaitGroup
}

var (
	_ Source  = (*MQTTSource)(nil)
	_ Sharing = (*MQTTSource)(nil)
)

// NewMQTTSource validates opts. Run connects.
func NewMQTTSource(opts MQTTOptions) (*MQTTSource, error) {
	if len(opts.Brokers) == 0 {
		return nil, errors.New("ingest: mqtt needs at least one broker")
	}
	for _, b := range opts.Brokers {
		u, err := url.Parse(b)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("ingest: mqtt broker %q: want scheme://host:port", config.RedactURL(b))
		}
		switch u.Scheme {
		case "tcp", "mqtt", "ssl", "tls", "mqtts", "tcps", "ws", "wss":
		default:
			return nil, fmt.Errorf("ingest: mqtt broker %q: unknown scheme %q", config.RedactURL(b), u.Scheme)
		}
	}
	if opts.ClientID == "" {
		return nil, errors.New("ingest: mqtt needs a fixed client id (the persistent session lives under it)")
	}
	if opts.QoS > 2 {
		return nil, fmt.Errorf("ingest: mqtt qos %d: want 0, 1 or 2", opts.QoS)
	}
	if len(opts.Subscriptions) == 0 {
		return nil, errors.New("ingest: mqtt needs at least one subscription")
	}
	if opts.MaxQueuedQoS0 <= 0 {
		opts.MaxQueuedQoS0 = 4096
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &MQTTSource{opts: opts, health: newHealthState(), acked: make(chan arrival, queuedAcked),
		unacked: make(chan arrival, opts.MaxQueuedQoS0), takeovers: map[string]*takeover{}}
	for _, sub := range opts.Subscriptions {
		t, err := parseTemplate(sub)
		if err != nil {
			return nil, err
		}
		s.templates = append(s.templates, t)
	}
	if s.opts.ConnectTimeout <= 0 {
		s.opts.ConnectTimeout = 10 * time.Second
	}
	if s.opts.KeepAlive <= 0 {
		s.opts.KeepAlive = 30 * time.Second
	}
	if s.opts.MaxReconnectInterval <= 0 {
		s.opts.MaxReconnectInterval = 10 * time.Second
	}
	if s.opts.DrainTimeout <= 0 {
		s.opts.DrainTimeout = 5 * time.Second
	}
	if s.opts.Logger == nil {
		s.opts.Logger = zap.NewNop()
	}
	s.log = s.opts.Logger.With(zap.String("component", "ingest-mqtt"))
	if opts.ProbeTopic != "" {
		s.probe = &mqttProbe{topic: opts.ProbeTopic, every: cmp.Or(opts.ProbeEvery, time.Second),
			late: cmp.Or(opts.ProbeLate, config.DefaultMaxLag), now: opts.Now}
	}
	return s, nil
}

// Name implements Source.
func (s *MQTTSource) Name() string { return SourceMQTT }

// Health implements Source. Lag is how long the oldest unacknowledged message has waited for the chain:
// MQTT has no offsets, so a stalled chain (Redis down) or a draining backlog is what shows.
func (s *MQTTSource) Health() Health {
	h := s.health.health(s.pending.lag(s.opts.Now()))
	h.OwnLag = h.Lag
	if since := s.probe.blind(s.opts.Now()); !since.IsZero() {
		h.Blind, h.BlindWhy = since, fmt.Sprintf("no probe came back from the broker within %s", s.probe.late)
	}
	return h
}

// ReadUpTo is the stamp of the last probe back from the broker, on the shared clock: it delivered
// everything sent before it (zero without a probe back).
func (s *MQTTSource) ReadUpTo() time.Time { return s.probe.readUpTo() }

// Filters returns the MQTT filters the source subscribes to.
func (s *MQTTSource) Filters() []string {
	f := make([]string, len(s.templates))
	for i, t := range s.templates {
		f[i] = t.filter
	}
	return f
}

// Run implements Source.
func (s *MQTTSource) Run(ctx context.Context, chain *Chain) error {
	defer s.setConnected(chain, false)
	var wg sync.WaitGroup
	defer wg.Wait()
	// The workers, the hand-off and takeovers end with Run, also when the first connection is refused
	// while ctx is still live; at shutdown the workers go on until the drain is over.
	work, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		stop()
		s.mu.Lock()
		s.ended = true // no takeover starts after this
		s.mu.Unlock()
		s.takingOver.Wait()
	}()
	s.mu.Lock()
	s.chain, s.ctx, s.ended = chain, work, false
	s.mu.Unlock()
	for range mqttWorkers {
		wg.Go(func() { s.worker(work, chain) })
	}

	client, err := s.connect(ctx, chain)
	if err != nil || client == nil {
		return err
	}
	if s.probe != nil {
		wg.Go(func() { s.probe.run(ctx, client, s.log) })
	}
	<-ctx.Done()
	if s.shared() {
		// A clean session loses what it holds at disconnect: first tell the broker to send the rest of
		// our share to the others, then store what came before.
		s.unsubscribe(client)
	}
	if !s.health.waitDrained(s.opts.DrainTimeout) {
		fate := "the broker delivers them again"
		if s.shared() {
			fate = "lost with the clean session"
		}
		s.log.Warn("shutdown: messages still unacknowledged: "+fate, zap.Int64("messages", s.health.outstanding.Load()))
	}
	client.Disconnect(250)
	return nil
}

// unsubscribe ends every subscription, waiting at most ConnectTimeout.
func (s *MQTTSource) unsubscribe(c mqtt.Client) {
	tok := c.Unsubscribe(s.Filters()...)
	if !tok.WaitTimeout(s.opts.ConnectTimeout) || tok.Error() != nil {
		s.log.Warn("shutdown: unsubscribing failed; what the broker sent meanwhile is lost with the clean session", zap.Error(tok.Error()))
	}
}

func redactBrokers(brokers []string) string {
	out := make([]string, len(brokers))
	for i, b := range brokers {
		out[i] = config.RedactURL(b)
	}
	return strings.Join(out, ",")
}

// mqttWorkers decode and submit in parallel; the chain's batcher is the serial part after them.
const mqttWorkers = 4

// connect makes the first connection, retrying with backoff while the broker is unreachable. A refusal
// that retrying cannot fix (credentials, an untrusted or rejected certificate) is returned. After the
// first connection paho reconnects by itself and OnConnect re-subscribes.
func (s *MQTTSource) connect(ctx context.Context, chain *Chain) (mqtt.Client, error) {
	var client mqtt.Client
	err := loop.Retry(ctx, loop.RetryOptions{Backoff: loop.Backoff{Min: 200 * time.Millisecond, Max: s.opts.MaxReconnectInterval},
		Permanent: permanentConnError,
		OnError: func(err error, failures int, _ time.Duration) {
			if failures%10 == 1 {
				s.log.Warn("mqtt broker unreachable; retrying", zap.Int("attempt", failures), zap.Error(err))
			}
		}},
		func(ctx context.Context) error {
			c := mqtt.NewClient(s.clientOptions(chain))
			tok := c.Connect()
			select {
			case <-tok.Done():
			case <-ctx.Done():
				c.Disconnect(0)
				return ctx.Err()
			}
			if err := tok.Error(); err != nil {
				return fmt.Errorf("ingest: mqtt broker %s: %w", redactBrokers(s.opts.Brokers), err)
			}
			client = c
			return nil
		})
	switch {
	case err == nil:
		s.mu.Lock()
		s.client = client
		s.mu.Unlock()
		return client, nil
	case ctx.Err() != nil:
		return nil, nil
	}
	s.log.Error("mqtt connection refused", zap.Error(err))
	return nil, err
}

// connectionOptions are how any client of this source reaches the brokers: addresses, TLS, credentials.
func (s *MQTTSource) connectionOptions() *mqtt.ClientOptions {
	o := mqtt.NewClientOptions()
	for _, b := range s.opts.Brokers {
		o.AddBroker(b)
	}
	tlsCfg := s.opts.TLS
	if tlsCfg == nil {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	o.SetStore(mqttutil.NewStore()) // the probe publishes at QoS 1, also while paho reconnects
	return o.SetTLSConfig(tlsCfg).
		SetUsername(s.opts.Username).
		SetPassword(s.opts.Password).
		SetProtocolVersion(4).
		SetConnectTimeout(s.opts.ConnectTimeout).
		SetWriteTimeout(10 * time.Second)
}

func (s *MQTTSource) clientOptions(chain *Chain) *mqtt.ClientOptions {
	return s.connectionOptions().
		SetClientID(s.opts.ClientID).
		// Unshared: the broker queues QoS 1 messages for us while we are away and redelivers what we did
		// not acknowledge, so nothing a device sent during a restart is lost. Shared: a dead replica's
		// persistent session keeps receiving its share of the group's messages (mosquitto goes on routing
		// to it while it is offline) and nobody reads them; a clean session ends with the connection and
		// the broker hands the share to the others. What it held is lost: the hold-back covers that
		// (Shares).
		SetCleanSession(s.shared()).
		// A message is acknowledged only after its deadline write: the chain calls Ack.
		SetAutoAckDisabled(true).
		// Messages reach the handler one at a time, on paho's own goroutine: no goroutine per message,
		// which a QoS 0 flood would pile up without bound while Redis is slow. The handler only queues
		// (or sheds), so it does not hold up paho's reader and its keep-alives.
		SetOrderMatters(true).
		// Set before Connect: a resumed session's backlog arrives right after CONNACK, before any
		// subscription of this process exists, and would otherwise be dropped unacknowledged.
		SetDefaultPublishHandler(func(_ mqtt.Client, m mqtt.Message) { s.onMessage(chain, m) }).
		SetAutoReconnect(true).
		SetConnectRetry(false).
		SetKeepAlive(s.opts.KeepAlive).
		SetPingTimeout(min(s.opts.KeepAlive, 10*time.Second)).
		SetMaxReconnectInterval(s.opts.MaxReconnectInterval).
		SetOnConnectHandler(func(c mqtt.Client) { s.onConnect(chain, c) }).
		SetConnectionLostHandler(func(_ mqtt.Client, err error) {
			s.setConnected(chain, false)
			s.log.Warn("mqtt connection lost; reconnecting", zap.Error(err))
		})
}

// onConnect (re-)subscribes on every connection: the session normally keeps the subscriptions, but a
// broker that lost its state (restart without persistence) would otherwise deliver nothing. A refused or
// failed SUBSCRIBE is retried with backoff on the same connection (an ACL fixed later, a broker busy);
// meanwhile the source reports disconnected, which holds detection back. A lost connection ends the
// retries: paho reconnects and calls onConnect again.
func (s *MQTTSource) onConnect(chain *Chain, c mqtt.Client) {
	s.mu.Lock()
	ctx := s.ctx
	s.mu.Unlock()
	err := loop.Retry(ctx, loop.RetryOptions{Backoff: loop.Backoff{Min: 200 * time.Millisecond, Max: s.opts.MaxReconnectInterval},
		Permanent: func(error) bool { return !c.IsConnectionOpen() },
		OnError: func(err error, failures int, retryIn time.Duration) {
			if failures%10 == 1 {
				s.log.Error("mqtt subscribe failed; retrying", zap.Int("attempt", failures), zap.Duration("retry_in", retryIn), zap.Error(err))
			}
		}},
		func(context.Context) error { return s.subscribe(c) })
	if err != nil {
		return
	}
	if s.probe != nil {
		if err := s.subscribeProbe(c); err != nil {
			s.log.Warn("mqtt probe not subscribed: a broker that stops delivering with its connection open goes unnoticed",
				zap.String("topic", s.probe.topic), zap.Error(err))
		}
		s.probe.connected()
	}
	s.setConnected(chain, true)
	s.log.Info("mqtt connected and subscribed", zap.Strings("filters", s.Filters()))
}

// subscribe asks for every filter once; the error names the filters the broker refused.
func (s *MQTTSource) subscribe(c mqtt.Client) error {
	filters := make(map[string]byte, len(s.templates))
	for _, t := range s.templates {
		filters[t.filter] = s.opts.QoS
	}
	tok := c.SubscribeMultiple(filters, nil) // nil: everything goes to the default handler
	if !tok.WaitTimeout(s.opts.ConnectTimeout) {
		return fmt.Errorf("ingest: mqtt subscribe timed out after %s", s.opts.ConnectTimeout)
	}
	if err := tok.Error(); err != nil {
		return fmt.Errorf("ingest: mqtt subscribe: %w", err)
	}
	var refused []string
	for filter, code := range tok.(*mqtt.SubscribeToken).Result() {
		if code == 0x80 {
			refused = append(refused, filter)
		}
	}
	if len(refused) > 0 {
		return fmt.Errorf("ingest: mqtt subscription refused by the broker (check its ACL): %s", strings.Join(refused, ", "))
	}
	return nil
}

// subscribeProbe subscribes to the probe's topic with QoS 1, so that each probe is delivered in line
// with the signals (mqttprobe.go).
func (s *MQTTSource) subscribeProbe(c mqtt.Client) error {
	tok := c.Subscribe(s.probe.topic, 1, nil)
	if !tok.WaitTimeout(s.opts.ConnectTimeout) {
		return fmt.Errorf("ingest: mqtt probe subscribe timed out after %s", s.opts.ConnectTimeout)
	}
	if err := tok.Error(); err != nil {
		return fmt.Errorf("ingest: mqtt probe subscribe: %w", err)
	}
	if code := tok.(*mqtt.SubscribeToken).Result()[s.probe.topic]; code == 0x80 {
		return errors.New("ingest: mqtt probe subscription refused by the broker (check its ACL)")
	}
	return nil
}

// setConnected moves the gauge before the health, so whoever sees the health change (hold-back, a test)
// also reads the gauge that goes with it.
func (s *MQTTSource) setConnected(chain *Chain, up bool) {
	if chain != nil {
		chain.setConnected(SourceMQTT, up)
	}
	s.health.set(up)
}

func (s *MQTTSource) onMessage(chain *Chain, m mqtt.Message) {
	if s.probe.onEcho(m) {
		return
	}
	if m.Retained() {
		// A retained message is delivered on (re-)subscribe: an old signal replayed, not one sent now.
		// Taking it as a live signal would mark a long-silent device alive at every reconnect.
		chain.discard(SourceMQTT, resultRetained, m.Ack)
		return
	}
	a := arrival{m: m, at: s.opts.Now()}
	if m.Qos() == 0 {
		s.queueUnacked(chain, a)
		return
	}
	s.begin(&a)
	select {
	case s.acked <- a:
		return
	default:
	}
	// Only a broker without an in-flight window gets here: waiting stops paho's reader, and with it the
	// broker, until the chain takes messages again (keep-alives may then time out and reconnect).
	if s.warnedWindow.CompareAndSwap(false, true) {
		s.log.Warn("more unacknowledged QoS 1/2 messages than heartbeatd queues; set the broker's max_inflight_messages",
			zap.Int("queued", queuedAcked))
	}
	s.mu.Lock()
	ctx := s.ctx
	s.mu.Unlock()
	select {
	case s.acked <- a:
	case <-ctx.Done():
		s.finish(a.seq) // shutting down: unacknowledged, so the session delivers it again
	}
}

// begin counts a as handed on: it waits for its write from now.
func (s *MQTTSource) begin(a *arrival) {
	a.seq = s.pending.add(a.at)
	s.health.begin(1)
}

// finish counts the message begun as seq as written, or as given up (it is not acknowledged then, so the
// broker sends it again). It takes the number, not the arrival: an acknowledgement's closure holding the
// whole arrival would move each one to the heap.
func (s *MQTTSource) finish(seq uint64) {
	s.pending.done(seq)
	s.health.done()
}

// arrival is a message as paho handed it over, with when: the signal time of a message without ts. It
// is read here, in the order the broker delivered (paho calls onMessage one message at a time), and not
// by the workers, which run in parallel: a device's heartbeat and the failure it reports right after
// must not swap times on their way to the chain, or the failure would look older than the heartbeat
// and be dropped as late.
type arrival struct {
	m   mqtt.Message
	at  time.Time
	seq uint64 // in MQTTSource.pending
}

// queueUnacked queues a QoS 0 message for the workers, or sheds it when MaxQueuedQoS0 messages or
// maxQueuedQoS0Bytes are already waiting.
func (s *MQTTSource) queueUnacked(chain *Chain, a arrival) {
	size := int64(len(a.m.Payload()))
	if s.unackedBytes.Add(size) <= maxQueuedQoS0Bytes {
		s.begin(&a)
		select {
		case s.unacked <- a:
			return
		default:
			s.finish(a.seq)
		}
	}
	s.unackedBytes.Add(-size)
	chain.discard(SourceMQTT, resultShed, nil)
	if now, last := time.Now().UnixNano(), s.lastShedLog.Load(); now-last >= int64(time.Minute) && s.lastShedLog.CompareAndSwap(last, now) {
		s.log.Warn("shedding QoS 0 messages: more are waiting for Redis than the source queues (counted in heartbeatd_signals_total{result=\"shed\"})",
			zap.Int("queued", s.opts.MaxQueuedQoS0))
	}
}

// worker decodes and submits messages, those that wait for an acknowledgement first.
func (s *MQTTSource) worker(ctx context.Context, chain *Chain) {
	for {
		var a arrival
		select {
		case <-ctx.Done():
			return
		case a = <-s.acked:
		default:
			select {
			case <-ctx.Done():
				return
			case a = <-s.acked:
			case a = <-s.unacked:
				s.unackedBytes.Add(-int64(len(a.m.Payload())))
			}
		}
		m, seq := a.m, a.seq
		topic := m.Topic()
		f, tpl, ignored := matchTopic(s.templates, topic, m.Payload())
		if ignored {
			chain.discard(SourceMQTT, resultIgnored, func() {
				m.Ack()
				s.finish(seq)
			})
			continue
		}
		var presence string
		if tpl != nil {
			presence = tpl.presence
		}
		err := chain.Submit(ctx, Message{
			Source:      SourceMQTT,
			Topic:       topic,
			Device:      f.device,
			TopicDevice: f.hasDevice,
			Type:        f.typ,
			Parent:      f.parent,
			Presence:    presence,
			Payload:     m.Payload(),
			Received:    a.at,
			Ack: func() {
				m.Ack()
				s.finish(seq)
			},
		})
		if err != nil {
			s.finish(seq) // shutting down: unacknowledged, so the session delivers it again
		}
	}
}

// permanentConnError reports whether a connection error is a configuration problem: retrying cannot fix
// a refused login or a certificate that does not verify.
func permanentConnError(err error) bool {
	switch {
	case errors.Is(err, packets.ErrorRefusedBadUsernameOrPassword),
		errors.Is(err, packets.ErrorRefusedNotAuthorised),
		errors.Is(err, packets.ErrorRefusedIDRejected),
		errors.Is(err, packets.ErrorRefusedBadProtocolVersion):
		return true
	}
	return certificateError(err)
}

// certificateError reports a TLS verification failure on either side.
func certificateError(err error) bool {
	var (
		verr  *tls.CertificateVerificationError
		ua    x509.UnknownAuthorityError
		host  x509.HostnameError
		inval x509.CertificateInvalidError
		alert tls.AlertError
		rec   tls.RecordHeaderError
		op    *net.OpError
	)
	if errors.As(err, &op) && op.Op == "remote error" {
		return true // the server sent a TLS alert: it rejected our certificate or our handshake
	}
	return errors.As(err, &verr) || errors.As(err, &ua) || errors.As(err, &host) || errors.As(err, &inval) ||
		errors.As(err, &alert) || errors.As(err, &rec)
}
