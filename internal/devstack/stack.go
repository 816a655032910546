// Package devstack is `heartbeatd dev`: Dev runs an in-process Redis-protocol server (miniredis), MQTT
// broker (mochi-mqtt) and Kafka-protocol broker (kfake) on loopback, the daemon on them, a simulated fleet
// in which some devices fall silent, and a printer that turns the events topic into one readable log line
// per event. Nothing has to be installed: every server runs inside the process. Simulate runs the fleet
// alone against a real broker.
//
// None of it is meant for production: the servers keep everything in memory and vanish on exit. The
// package sits above internal/daemon, which never imports it, so the production packages do not link the
// in-process servers.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/alicebob/miniredis/v2"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/zap"
)

// Well-known ports the stack takes when they are free, so the copy-paste lines of the banner stay the same
// from one run to the next. They sit away from the servers' standard ports (6379, 1883, 9092) so a dev
// stack never collides with a real server on the same machine.
const (
	redisPort = 16379
	mqttPort  = 11883
	kafkaPort = 19092
)

// Topic names of the dev setup; the daemon's dev config names the same.
const (
	topicSignals    = "device-signals"
	topicEvents     = "heartbeat.events"
	topicDeadletter = "heartbeat.deadletter"
)

// defaultTopics are the topics start creates when Options.Topics is empty.
var defaultTopics = []string{topicSignals, topicEvents, topicDeadletter}

// Options configures start.
type Options struct {
	Logger *zap.Logger
	// Topics are created in the Kafka broker at start; empty = defaultTopics.
	Topics []string
	// Partitions per topic; 0 = 1, so the event printer shows events in the order they were published.
	Partitions int32
	// AnyPorts skips the well-known ports and takes free ones (tests, or a second stack on one machine).
	AnyPorts bool
}

// Stack is the running set of in-process servers. Close stops them.
type Stack struct {
	RedisAddr    string   // host:port of the Redis-protocol server
	MQTTBroker   string   // tcp://host:port
	KafkaBrokers []string // host:port of each Kafka broker

	log       *zap.Logger
	redis     *miniredis.Miniredis
	mqtt      *mqtt.Server
	kafka     *kfake.Cluster
	closeOnce sync.Once
}

// start starts the three servers on 127.0.0.1. They run until Close; ctx only bounds the start itself.
func start(ctx context.Context, opts Options) (*Stack, error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if len(opts.Topics) == 0 {
		opts.Topics = defaultTopics
	}
	if opts.Partitions <= 0 {
		opts.Partitions = 1
	}
	s := &Stack{log: opts.Logger.With(zap.String("component", "devstack"))}
	// Each start registers its own cleanup, so a failure half-way stops what already runs.
	steps := []func(Options) error{s.startRedis, s.startMQTT, s.startKafka}
	for _, step := range steps {
		if err := ctx.Err(); err != nil {
			s.Close()
			return nil, fmt.Errorf("devstack: start: %w", err)
		}
		if err := step(opts); err != nil {
			s.Close()
			return nil, err
		}
	}
	s.log.Info("dev servers started", zap.String("redis", s.RedisAddr), zap.String("mqtt", s.MQTTBroker),
		zap.Strings("kafka", s.KafkaBrokers), zap.Strings("topics", opts.Topics))
	return s, nil
}

// listenPreferred runs start on the well-known port and, when that port is taken, on a free one. The
// library opens the listener itself, so there is no window between probing a port and using it.
func listenPreferred(opts Options, port int, start func(addr string) error) error {
	if !opts.AnyPorts {
		err := start(loopback(port))
		if err == nil || !isAddrInUse(err) {
			return err
		}
	}
	return start(loopback(0))
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

func isAddrInUse(err error) bool {
	var opErr *net.OpError
	// EADDRINUSE, and EACCES where a port is reserved: either way another port will do.
	return errors.As(err, &opErr) && opErr.Op == "listen"
}

func (s *Stack) startRedis(opts Options) error {
	m := miniredis.NewMiniRedis()
	// Leases (`SET PX`, PEXPIRE) must lapse in real time as on a real Redis; by default miniredis only
	// expires keys when a test fast-forwards it.
	m.ClockTTL(true)
	if err := listenPreferred(opts, redisPort, m.StartAddr); err != nil {
		return fmt.Errorf("devstack: start redis: %w", err)
	}
	m.Server().SetPreHook(zaddInOrder(m.Server()))
	s.redis = m
	s.RedisAddr = m.Addr()
	return nil
}

// mqttCapabilities raises mochi's per-client limits: past them it drops QoS 1 messages (with a warning),
// and a daemon that was busy or briefly disconnected must get every signal of a fleet.
func mqttCapabilities() *mqtt.Capabilities {
	c := mqtt.NewDefaultServerCapabilities()
	c.MaximumInflight = 65535                // packet ids are 16 bits: the most a client can have unacknowledged
	c.ReceiveMaximum = 65535                 // MQTT 5 clients may send this many QoS 1 messages unacknowledged
	c.MaximumClientWritesPending = 32 * 1024 // outbound queue per client (a buffered channel: 256 KiB)
	return c
}

func (s *Stack) startMQTT(opts Options) error {
	srv := mqtt.New(&mqtt.Options{
		Capabilities: mqttCapabilities(),
		Logger:       newSlogLogger(opts.Logger.With(zap.String("component", "mqtt-broker"))),
	})
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		return fmt.Errorf("devstack: mqtt auth hook: %w", err)
	}
	var tcp *listeners.TCP
	err := listenPreferred(opts, mqttPort, func(addr string) error {
		l := listeners.NewTCP(listeners.Config{ID: "tcp-" + addr, Address: addr})
		if err := srv.AddListener(l); err != nil {
			return err
		}
		tcp = l
		return nil
	})
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("devstack: start mqtt: %w", err)
	}
	if err := srv.Serve(); err != nil {
		_ = srv.Close()
		return fmt.Errorf("devstack: serve mqtt: %w", err)
	}
	s.mqtt = srv
	s.MQTTBroker = "tcp://" + tcp.Address()
	return nil
}

func (s *Stack) startKafka(opts Options) error {
	klog := &kfakeLogger{log: opts.Logger.With(zap.String("component", "kafka-broker"))}
	var cluster *kfake.Cluster
	err := listenPreferred(opts, kafkaPort, func(addr string) error {
		_, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(opts.Partitions, opts.Topics...),
			kfake.WithLogger(klog), kfake.ClusterID("heartbeatd-dev"))
		if err != nil {
			return err
		}
		cluster = c
		return nil
	})
	if err != nil {
		return fmt.Errorf("devstack: start kafka: %w", err)
	}
	s.kafka = cluster
	s.KafkaBrokers = cluster.ListenAddrs()
	return nil
}

// Close stops the servers: clients still connected see their connections drop. It is safe to call more
// than once.
func (s *Stack) Close() {
	s.closeOnce.Do(func() {
		if s.kafka != nil {
			s.kafka.Close()
		}
		if s.mqtt != nil {
			// mochi-mqtt v2.7.9's own client close (Clients.GetByListener) read-locks the client map twice;
			// a client reconnecting at that moment queues a write lock between the two and the broker
			// deadlocks (seen in CI). Disconnecting the clients ourselves first, with one read lock, makes
			// the listeners skip that path: each listener closes its clients only once.
			s.mqtt.Listeners.CloseAll(func(listener string) {
				for _, cl := range s.mqtt.Clients.GetAll() {
					if cl.Net.Listener == listener {
						_ = s.mqtt.DisconnectClient(cl, packets.ErrServerShuttingDown)
					}
				}
			})
			_ = s.mqtt.Close()
		}
		if s.redis != nil {
			s.redis.Close()
		}
		if s.RedisAddr != "" {
			s.log.Info("dev servers stopped")
		}
	})
}

// kfakeLogger passes the Kafka broker's warnings and errors on; its info level logs every request.
type kfakeLogger struct{ log *zap.Logger }

func (l *kfakeLogger) Logf(level kfake.LogLevel, msg string, args ...any) {
	var lvl = zap.DebugLevel
	switch level {
	case kfake.LogLevelError:
		lvl = zap.ErrorLevel
	case kfake.LogLevelWarn:
		lvl = zap.WarnLevel
	case kfake.LogLevelInfo, kfake.LogLevelDebug:
		return
	}
	if ce := l.log.Check(lvl, fmt.Sprintf(msg, args...)); ce != nil {
		ce.Write()
	}
}
