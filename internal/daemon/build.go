package daemon

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/alarm"
	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/correlate"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/eventkafka"
	"github.com/heartbeatd/heartbeatd/internal/history"
	"github.com/heartbeatd/heartbeatd/internal/holdback"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/kafkaclient"
	"github.com/heartbeatd/heartbeatd/internal/scan"
	"github.com/heartbeatd/heartbeatd/internal/silence"
	"github.com/heartbeatd/heartbeatd/internal/sweep"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// build makes every component of one heartbeatd from cfg, in dependency order; Run starts them
// (daemon.go). On an error it closes the clients it opened.
func build(cfg *config.Config, coord *config.Coordinator, reg *prometheus.Registry, log *zap.Logger, opts Options) (*daemon, error) {
	d := &daemon{cfg: cfg, log: log, opts: opts, coord: coord}
	d.policies.Store(cfg.Policies())
	fail := func(err error) (*daemon, error) {
		d.closeClients()
		return nil, err
	}
	if err := d.buildStore(reg); err != nil {
		return fail(err)
	}
	if err := d.buildPublisher(); err != nil {
		return fail(err)
	}
	d.replica = cfg.Cluster.ReplicaIDOrDefault()
	d.metrics = alarm.NewMetrics(reg)
	d.forgotten = sweep.NewForgottenCounter(reg)
	d.slotsOwned = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "slots_owned", Help: "Slots this replica scans."})
	reg.MustRegister(d.slotsOwned)
	pol := d.policies.Load()
	d.ownership = scan.NewOwnership(d.store, scan.OwnershipOptions{ReplicaID: d.replica, Heartbeat: cfg.Cluster.ReplicaHeartbeat,
		SlotLease: cfg.Cluster.SlotLease, RetireAfter: pol.LongestTimeout() + pol.LongestCycle(), Logger: log,
		Now: d.clock.Now, Eligible: func() bool { return d.holdBack.Scans() }})
	var err error
	d.chain, err = ingest.NewChain(d.store, d.publisher, ingest.ChainOptions{MaxClockSkew: cfg.Ingest.MaxClockSkew,
		Coalesce: cfg.Ingest.Coalesce, Batch: cfg.Ingest.Batch, Linger: cfg.Ingest.Linger, MaxInFlight: cfg.Ingest.MaxInFlight,
		KnownType:    func(name string) bool { _, ok := d.policies.Load().Lookup(name); return ok },
		OfflineGrace: cfg.Ingest.OfflineGrace, Now: d.clock.Now, Logger: log, Registerer: reg})
	if err != nil {
		return fail(err)
	}
	// This process among the replica's: the others tell a restart from a pause by it.
	d.incarnation = rand.Text()[:12]
	if err := d.buildSources(); err != nil {
		return fail(err)
	}
	d.holdBack = d.buildHoldBack(d.replica, reg)
	if err := d.buildObservers(reg); err != nil {
		return fail(err)
	}
	acts := d.buildAlarms(reg)
	if cfg.Notify.Enabled {
		if d.notifier, err = newNotifier(cfg, d.rdb, d.store, d.clock.Now, log, reg); err != nil {
			return fail(err)
		}
	}
	coord.Subscribe(d.applyTypes)
	if err := d.buildServer(reg, acts); err != nil {
		return fail(err)
	}
	return d, nil
}

// buildStore connects to Redis and opens the deadline store on the clock the replicas share.
func (d *daemon) buildStore(reg *prometheus.Registry) error {
	cfg := d.cfg
	var err error
	if d.rdb, err = newRedis(cfg); err != nil {
		return err
	}
	// Every time below is on the clock the replicas share: local time corrected by its offset from Redis.
	d.clock = holdback.NewClock(holdback.ClockOptions{Client: d.rdb, MaxOffset: cfg.Detection.MaxClockOffset, Logger: d.log, Registerer: reg})
	// A late first word is kept as long as detection may be held back for the blind window it waited in.
	d.store, err = deadline.New(d.rdb, deadline.Options{KeyPrefix: cfg.Redis.KeyPrefix, Slots: cfg.Redis.Slots, Timeout: d.timeout,
		RepeatEvery: d.repeatEvery, Now: d.clock.Now, LateFirstWord: cfg.Detection.MaxHoldBack, Expected: d.expected,
		WarnAfter: d.warnAfter})
	return err
}

// newRedis is the Redis client of redis.*.
func newRedis(cfg *config.Config) (redis.UniversalClient, error) {
	redisTLS, err := cfg.Redis.TLS.Build()
	if err != nil {
		return nil, fmt.Errorf("redis.tls: %w", err)
	}
	return newRedisClient(&redis.UniversalOptions{
		Addrs: cfg.Redis.Addrs, Username: cfg.Redis.Username, Password: cfg.Redis.Password, DB: cfg.Redis.DB,
		TLSConfig: redisTLS, PoolSize: cfg.Redis.PoolSize,
	}), nil
}

// buildPublisher makes the Kafka publisher of the events and dead letters.
func (d *daemon) buildPublisher() error {
	k := d.cfg.Events.Kafka
	eventsTLS, err := k.TLS.Build()
	if err != nil {
		return fmt.Errorf("events.kafka.tls: %w", err)
	}
	eventsSASL, err := kafkaclient.SASLMechanism(k.SASL.MechanismName, k.SASL.Username, k.SASL.Password)
	if err != nil {
		return fmt.Errorf("events.kafka.sasl: %w", err)
	}
	d.publisher, err = eventkafka.NewPublisher(eventkafka.PublisherOptions{Brokers: k.Brokers, Topic: k.Topic,
		DeadLetterTopic: k.DeadletterTopic, Source: eventkafka.CloudEventsSource(d.cfg.Redis.KeyPrefix),
		Topics: eventkafka.TopicCreation{Create: k.CreateTopics.Enabled, Partitions: k.CreateTopics.Partitions,
			ReplicationFactor: k.CreateTopics.ReplicationFactor},
		TLS: eventsTLS, SASL: eventsSASL, Logger: d.log})
	return err
}

// buildAlarms wires what turns claims and operator acts into events: the one sink, the silences, the
// correlator and the claim handler. It returns the operator acts' publisher, which the API uses.
func (d *daemon) buildAlarms(reg *prometheus.Registry) *alarm.Acts {
	cfg, log := d.cfg, d.log
	// One sink for every event: the alarm loop's, the operator acts' and the silences' alike, so the
	// degraded mark and the outputs that follow Kafka treat them the same.
	// The history records what Kafka took from its own consumer group of the events topic, off this path
	// (docs/concepts.md#incident-history; run by the lifecycle).
	d.history = history.New(history.Options{Client: d.rdb, KeyPrefix: cfg.Redis.KeyPrefix, History: cfg.History,
		Labels: d.store.Registry().Labels, Now: d.clock.Now, Logger: log, Registerer: reg})
	if label := cfg.Metrics.GroupLabel; label != "" {
		reg.MustRegister(history.NewGroupCollector(d.history, label, cfg.Metrics.MaxGroups))
	}
	sink := holdback.DegradedSink(event.Observed(d.publisher, d.observers...),
		d.holdBack.DegradedFor(d.timeout))
	acts := alarm.NewActs(alarm.ActsOptions{Sink: sink, Metrics: d.metrics, Registerer: reg, Logger: log})
	d.silences = silence.New(d.rdb, silence.Options{Store: d.store, Events: acts, KeyPrefix: cfg.Redis.KeyPrefix, Now: d.clock.Now, Logger: log,
		PerToken:  cfg.HTTP.MaxSilencesPerToken,
		Intervals: d.interval})
	d.correlator = correlate.New(correlate.Options{Client: d.rdb, Store: d.store, Correlation: cfg.Correlation,
		Sink: sink, ReplicaID: d.replica, Labels: d.store.Registry().Labels, Now: d.clock.Now, Logger: log, KeyPrefix: cfg.Redis.KeyPrefix,
		Events: d.metrics.Events, Metrics: correlate.NewMetrics(reg)})
	d.handler = alarm.NewHandler(alarm.HandlerOptions{Store: d.store, Policies: d.policies.Load, Correlator: d.correlator,
		Sink:     sink,
		Silences: d.silences, ParentWait: cfg.Detection.ParentWait, Lease: cfg.Detection.Lease, MaxPublishAttempts: cfg.Detection.MaxPublishAttempts, Refused: eventkafka.Refused, Now: d.clock.Now,
		Logger: log, Metrics: d.metrics})
	return acts
}

// buildServer listens on http.listen and builds the HTTP server of the API, health and metrics.
func (d *daemon) buildServer(reg *prometheus.Registry, acts *alarm.Acts) error {
	cfg, log := d.cfg, d.log
	var err error
	d.listener, err = net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http.listen: %w", err)
	}
	d.health = newHealth(d.ready, HealthOptions{Logger: log})
	d.eviction = newEvictionGuard(d.rdb, log)
	d.registerMetrics(reg)
	d.server = &http.Server{
		Handler: NewAPI(APIOptions{Store: d.store, Silences: d.silences, HoldBack: d.holdBack.Status, Health: d.health, Notes: d.notes,
			Reload: d.coord.Reload, OwnedSlots: d.ownership.Slots, Timeout: d.timeout, WarnAfter: d.warnAfter, Tokens: cfg.HTTP.AccessTokens(),
			QuietUntil: d.quietUntil, QuietNow: d.quietNow,
			Advice:   func() ingest.TimeoutAdvice { return d.chain.Intervals().Advise(d.replica, d.policies.Load()) },
			Gatherer: reg, Registerer: reg, MaxBodySize: cfg.HTTP.MaxBodyBytes, Now: d.clock.Now, Logger: log, Stream: d.stream, Events: acts,
			Outages: d.correlator, KnownType: d.knownType, Signals: d.chain, History: d.history}),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      60 * time.Second, // by_type stats scan every device
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          zap.NewStdLog(log.With(zap.String("component", "http"))),
	}
	d.server.RegisterOnShutdown(d.stream.Close) // live streams would hold Shutdown until their clients left
	return nil
}

func (d *daemon) buildSources() error {
	in := d.cfg.Ingest
	// A source waits at shutdown for its submitted messages to be acknowledged. Left at the sources'
	// default (5s) that wait could use all of shutdown_timeout while Redis is down, and every stage after
	// it would be cut off; half leaves the chain, scanners and clients the other half. What is not
	// acknowledged by then is delivered again by the broker.
	drain := d.cfg.ShutdownTimeout / 2
	if in.MQTT.Enabled {
		tlsCfg, err := in.MQTT.TLS.Build()
		if err != nil {
			return fmt.Errorf("ingest.mqtt.tls: %w", err)
		}
		src, err := ingest.NewMQTTSource(ingest.MQTTOptions{Brokers: in.MQTT.Brokers, ClientID: d.cfg.MQTTClientID(),
			Username: in.MQTT.Username, Password: in.MQTT.Password, TLS: tlsCfg, QoS: byte(in.MQTT.QoS),
			Subscriptions: in.MQTT.Subscriptions, DrainTimeout: drain, ProbeTopic: d.cfg.MQTTProbeTopic(), ProbeEvery: d.cfg.MQTTProbeEvery(),
			ProbeLate: in.MaxLag, Now: d.clock.Now, Logger: d.log})
		if err != nil {
			return err
		}
		d.sources = append(d.sources, src)
	}
	if in.Kafka.Enabled {
		tlsCfg, err := in.Kafka.TLS.Build()
		if err != nil {
			return fmt.Errorf("ingest.kafka.tls: %w", err)
		}
		mech, err := kafkaclient.SASLMechanism(in.Kafka.SASL.MechanismName, in.Kafka.SASL.Username, in.Kafka.SASL.Password)
		if err != nil {
			return fmt.Errorf("ingest.kafka.sasl: %w", err)
		}
		src, err := ingest.NewKafkaSource(ingest.KafkaOptions{Brokers: in.Kafka.Brokers, Topics: in.Kafka.Topics,
			GroupID: in.Kafka.GroupID, SessionTimeout: in.Kafka.SessionTimeout, // heartbeat and rebalance follow it
			TLS: tlsCfg, SASL: mech, DrainTimeout: drain, Member: d.cfg.Cluster.ReplicaIDOrDefault() + "/" + d.incarnation,
			Now: d.clock.Now, Logger: d.log})
		if err != nil {
			return err
		}
		d.sources = append(d.sources, src)
	}
	return nil
}
