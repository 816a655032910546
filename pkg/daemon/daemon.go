// Package daemon builds heartbeatd's components from its configuration, runs them as one group and
// stops them in order; it also serves the HTTP API and metrics. It wires pkg/ingest, pkg/deadline,
// pkg/alarm and pkg/event together and re-implements none of them.
package daemon

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/heartbeatd/heartbeatd/internal/kafkaclient"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/pkg/alarm"
	"github.com/heartbeatd/heartbeatd/pkg/config"
	"github.com/heartbeatd/heartbeatd/pkg/correlate"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
	"github.com/heartbeatd/heartbeatd/pkg/event/kafka"
	"github.com/heartbeatd/heartbeatd/pkg/holdback"
	"github.com/heartbeatd/heartbeatd/pkg/ingest"
	"github.com/heartbeatd/heartbeatd/pkg/silence"
)

// BuildInfo is what `heartbeatd version` prints and the log's first line carries.
type BuildInfo struct {
	Version, Commit string
}

// Options start the daemon.
type Options struct {
	ConfigPath string
	// Env looks up HEARTBEATD_* overrides (os.LookupEnv); nil = none.
	Env   func(string) (string, bool)
	Build BuildInfo
	// Reload receives a value for every SIGHUP.
	Reload <-chan struct{}
	// Logger, when set, replaces the one built from log.* (dev mode, tests).
	Logger *zap.Logger
	// Started, when set, is called with the HTTP address once every component runs.
	Started func(httpAddr string)
}

// CheckConfig loads and validates the file as `run` would and returns the resolved policy table, then
// the insecure settings `run` would warn about.
func CheckConfig(path string, env func(string) (string, bool)) (string, error) {
	cfg, err := config.LoadEnv(path, env)
	if err != nil {
		return "", err
	}
	out := cfg.PolicyTable() + "\n" + cfg.CorrelationTable() + scheduleTable(cfg)
	for i, w := range cfg.Warnings() {
		if i == 0 {
			out += "\n"
		}
		out += fmt.Sprintf("warning: %s: %s\n", w.Key, w.Message)
	}
	return out, nil
}

// Run runs heartbeatd until ctx is done or a component fails, then stops everything in order within
// shutdown_timeout.
func Run(ctx context.Context, opts Options) error {
	cfg, err := config.LoadEnv(opts.ConfigPath, opts.Env)
	if err != nil {
		return err
	}
	log := opts.Logger
	if log == nil {
		if log, err = newLogger(cfg.Log); err != nil {
			return err
		}
		defer func() { _ = log.Sync() }()
		// go-redis prints its connection errors with the standard log package: plain text between the
		// JSON lines, dozens a second while Redis is down. Every failure it reports also fails a call
		// the daemon logs with context, so its lines go into the log at debug. Only for the logger Run
		// built itself: the setting is process-wide and must not outlive a caller's logger (tests).
		redis.SetLogger(redisLogger{log.With(zap.String("component", "go-redis")).Sugar()})
	}
	log.Info("heartbeatd starting", zap.String("version", opts.Build.Version), zap.String("commit", opts.Build.Commit),
		zap.String("config", opts.ConfigPath))
	for _, w := range cfg.Warnings() {
		log.Warn("insecure setting", zap.String("component", "config"), zap.String("key", w.Key), zap.String("why", w.Message))
	}
	for _, w := range cfg.Deprecations() {
		log.Warn("deprecated setting", zap.String("component", "config"), zap.String("key", w.Key), zap.String("why", w.Message))
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	coord := config.NewCoordinator(opts.ConfigPath, opts.Env, log, reg, cfg)
	d, err := build(cfg, coord, reg, log, opts)
	if err != nil {
		return err
	}
	return d.run(ctx)
}

// daemon is every component of one running heartbeatd.
type daemon struct {
	cfg      *config.Config
	log      *zap.Logger
	opts     Options
	coord    *config.Coordinator
	policies atomic.Pointer[config.Policies]

	rdb       redis.UniversalClient
	clock     *holdback.Clock
	store     *deadline.Store
	publisher *kafka.Publisher
	silences  *silence.Silences
	metrics   *alarm.Metrics
	ownership *deadline.Ownership
	holdBack  *holdback.Tracker
	// correlator groups interruptions into outages; nil while correlation is off.
	correlator *correlate.Correlator
	handler    *alarm.Handler
	chain      *ingest.Chain
	sources    []ingest.Source
	listener   net.Listener
	health     *Health
	server     *http.Server
	replica    string
	eviction   *evictionGuard

	// observers follow the events Kafka acknowledged (observers.go); outputs are their loops.
	observers []event.Observer
	outputs   []output
	stream    *EventStream // one of observers: the status page's live events

	slotsOwned prometheus.Gauge
	// incarnation tells this process from the replica's earlier ones (holdback.Options).
	incarnation string
}

func build(cfg *config.Config, coord *config.Coordinator, reg *prometheus.Registry, log *zap.Logger, opts Options) (*daemon, error) {
	d := &daemon{cfg: cfg, log: log, opts: opts, coord: coord}
	d.policies.Store(cfg.Policies())
	fail := func(err error) (*daemon, error) {
		d.closeClients()
		return nil, err
	}

	redisTLS, err := cfg.Redis.TLS.Build()
	if err != nil {
		return fail(fmt.Errorf("redis.tls: %w", err))
	}
	d.rdb = newRedisClient(&redis.UniversalOptions{
		Addrs: cfg.Redis.Addrs, Username: cfg.Redis.Username, Password: cfg.Redis.Password, DB: cfg.Redis.DB,
		TLSConfig: redisTLS, PoolSize: cfg.Redis.PoolSize,
	})
	// Every time below is on the clock the replicas share: local time corrected by its offset from Redis.
	d.clock = holdback.NewClock(holdback.ClockOptions{Client: d.rdb, MaxOffset: cfg.Detection.MaxClockOffset, Logger: log, Registerer: reg})
	// A late first word is kept as long as detection may be held back for the blind window it waited in.
	d.store, err = deadline.New(d.rdb, deadline.Options{KeyPrefix: cfg.Redis.KeyPrefix, Slots: cfg.Redis.Slots, Timeout: d.timeout,
		RepeatEvery: d.repeatEvery, Now: d.clock.Now, LateFirstWord: cfg.Detection.MaxHoldBack, Expected: d.expected})
	if err != nil {
		return fail(err)
	}

	eventsTLS, err := cfg.Events.Kafka.TLS.Build()
	if err != nil {
		return fail(fmt.Errorf("events.kafka.tls: %w", err))
	}
	eventsSASL, err := kafkaclient.SASLMechanism(cfg.Events.Kafka.SASL.MechanismName, cfg.Events.Kafka.SASL.Username,
		cfg.Events.Kafka.SASL.Password)
	if err != nil {
		return fail(fmt.Errorf("events.kafka.sasl: %w", err))
	}
	d.publisher, err = kafka.NewPublisher(kafka.PublisherOptions{Brokers: cfg.Events.Kafka.Brokers, Topic: cfg.Events.Kafka.Topic,
		DeadLetterTopic: cfg.Events.Kafka.DeadletterTopic, Source: kafka.CloudEventsSource(cfg.Redis.KeyPrefix),
		Topics: kafka.TopicCreation{Create: cfg.Events.Kafka.CreateTopics.Enabled, Partitions: cfg.Events.Kafka.CreateTopics.Partitions,
			ReplicationFactor: cfg.Events.Kafka.CreateTopics.ReplicationFactor},
		TLS: eventsTLS, SASL: eventsSASL, Logger: log})
	if err != nil {
		return fail(err)
	}

	replica := cfg.Cluster.ReplicaIDOrDefault()
	d.replica = replica
	d.metrics = alarm.NewMetrics(reg)
	d.slotsOwned = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "slots_owned", Help: "Slots this replica scans."})
	reg.MustRegister(d.slotsOwned)
	pol := d.policies.Load()
	d.ownership = deadline.NewOwnership(d.store, deadline.OwnershipOptions{ReplicaID: replica, Heartbeat: cfg.Cluster.ReplicaHeartbeat,
		SlotLease: cfg.Cluster.SlotLease, RetireAfter: pol.LongestTimeout() + pol.LongestCycle(), Logger: log,
		Now: d.clock.Now, Eligible: func() bool { return d.holdBack.Scans() }})

	d.chain, err = ingest.NewChain(d.store, d.publisher, ingest.ChainOptions{MaxClockSkew: cfg.Ingest.MaxClockSkew,
		Coalesce: cfg.Ingest.Coalesce, Batch: cfg.Ingest.Batch, Linger: cfg.Ingest.Linger, MaxInFlight: cfg.Ingest.MaxInFlight,
		KnownType: func(name string) bool { _, ok := d.policies.Load().Lookup(name); return ok },
		Now:       d.clock.Now, Logger: log, Registerer: reg})
	if err != nil {
		return fail(err)
	}
	// This process among the replica's: the others tell a restart from a pause by it.
	d.incarnation = rand.Text()[:12]
	if err := d.buildSources(); err != nil {
		return fail(err)
	}
	d.holdBack = d.buildHoldBack(replica, reg)
	if err := d.buildObservers(reg); err != nil {
		return fail(err)
	}
	// One sink for every event: the alarm loop's, the operator acts' and the silences' alike, so the
	// degraded mark and the outputs that follow Kafka treat them the same.
	sink := holdback.DegradedSink(event.Observed(d.publisher, d.observers...), d.holdBack.DegradedFor(d.timeout))
	acts := alarm.NewActs(alarm.ActsOptions{Sink: sink, Metrics: d.metrics, Registerer: reg, Logger: log})
	d.silences = silence.New(d.rdb, silence.Options{Store: d.store, Events: acts, KeyPrefix: cfg.Redis.KeyPrefix, Now: d.clock.Now, Logger: log,
		Intervals: d.interval})
	d.correlator = correlate.New(correlate.Options{Client: d.rdb, Store: d.store, Correlation: cfg.Correlation,
		Sink: sink, ReplicaID: replica, Labels: d.store.Labels, Now: d.clock.Now, Logger: log, KeyPrefix: cfg.Redis.KeyPrefix,
		Events: d.metrics.Events, OutagesOpen: d.metrics.OutagesOpen})
	d.handler = alarm.NewHandler(alarm.HandlerOptions{Store: d.store, Policies: d.policies.Load, Correlator: d.correlator,
		Sink:     sink,
		Silences: d.silences, ParentWait: cfg.Detection.ParentWait, MaxPublishAttempts: cfg.Detection.MaxPublishAttempts, Refused: kafka.Refused, Now: d.clock.Now,
		Logger: log, Metrics: d.metrics})

	coord.Subscribe(d.applyTypes)

	d.listener, err = net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		return fail(fmt.Errorf("http.listen: %w", err))
	}
	d.health = NewHealth(d.ready, HealthOptions{Logger: log})
	d.eviction = newEvictionGuard(d.rdb, log)
	d.registerMetrics(reg)
	d.server = &http.Server{
		Handler: NewAPI(APIOptions{Store: d.store, Silences: d.silences, HoldBack: d.holdBack.Status, Health: d.health, Notes: d.notes,
			Reload: d.coord.Reload, OwnedSlots: d.ownership.Slots, Timeout: d.timeout, Token: cfg.HTTP.Token,
			QuietUntil: d.quietUntil, QuietNow: d.quietNow,
			Advice:   func() ingest.TimeoutAdvice { return d.chain.Intervals().Advise(d.replica, d.policies.Load()) },
			Gatherer: reg, MaxBodySize: cfg.HTTP.MaxBodyBytes, Now: d.clock.Now, Logger: log, Stream: d.stream, Events: acts,
			Outages: d.correlator, KnownType: d.knownType}),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      60 * time.Second, // by_type stats scan every device
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          zap.NewStdLog(log.With(zap.String("component", "http"))),
	}
	d.server.RegisterOnShutdown(d.stream.Close) // live streams would hold Shutdown until their clients left
	return d, nil
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
		subs := make([]ingest.Subscription, len(in.MQTT.Subscriptions))
		for i, s := range in.MQTT.Subscriptions {
			subs[i] = ingest.Subscription{Topic: s.Topic, SharedGroup: s.SharedGroup}
		}
		src, err := ingest.NewMQTTSource(ingest.MQTTOptions{Brokers: in.MQTT.Brokers, ClientID: d.cfg.MQTTClientID(),
			Username: in.MQTT.Username, Password: in.MQTT.Password, TLS: tlsCfg, QoS: byte(in.MQTT.QoS),
			Subscriptions: subs, DrainTimeout: drain, ProbeTopic: d.cfg.MQTTProbeTopic(), ProbeEvery: d.cfg.MQTTProbeEvery(),
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

// timeout is a type's silence timeout under the current policies (unknown names get default's).
func (d *daemon) timeout(typeName string) time.Duration {
	p, _ := d.policies.Load().Lookup(typeName)
	return p.Timeout
}

// knownType says whether a type name is configured.
func (d *daemon) knownType(name string) bool {
	_, ok := d.policies.Load().Lookup(name)
	return ok
}

// syncOverrides keeps this replica's table of per-device timeouts in step with the registry, so a
// registration made through any replica applies to the signals every replica writes within seconds.
func (d *daemon) syncOverrides(ctx context.Context) error {
	loop.Every(ctx, loop.Options{Interval: 2 * time.Second, Immediate: true, MaxBackoff: 30 * time.Second,
		OnError: func(err error, failures int, retryIn time.Duration) {
			if failures == 1 || failures%10 == 0 {
				d.log.Warn("reading the per-device timeouts failed; retrying", zap.Error(err), zap.Duration("retry_in", retryIn))
			}
		}}, d.store.SyncOverrides)
	return nil
}

// repeatEvery is a type's repeat interval under the current policies, for the claims to commit with.
func (d *daemon) repeatEvery(typeName string) time.Duration {
	p, _ := d.policies.Load().Lookup(typeName)
	return p.RepeatEvery
}

// applyTypes swaps in a reloaded policy table; the scanners and the ingest chain read it at their next
// claim and signal. New type names are registered in Redis first, so a refresh never meets an unknown one.
func (d *daemon) applyTypes(cfg *config.Config) error {
	next := cfg.Policies()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.store.Load(ctx, next.Names()...); err != nil {
		return fmt.Errorf("register the types in Redis: %w", err)
	}
	d.policies.Store(next)
	return nil
}

// ready checks every dependency /readyz reports on.
func (d *daemon) ready(ctx context.Context) map[string]error {
	out := map[string]error{"redis": d.store.Ping(ctx), "events": d.publisher.Ready(ctx), "clock": d.clock.Check()}
	if f := d.chain.WriteFailure(); f != nil && out["redis"] == nil {
		out["redis"] = fmt.Errorf("refusing deadline writes since %s: %w", f.Since.UTC().Format(time.RFC3339), f.Err)
	}
	for _, src := range d.sources {
		out[src.Name()] = nil
		if since, why := d.trouble(src, d.clock.Now()); why != "" {
			out[src.Name()] = fmt.Errorf("%s since %s", why, since.UTC().Format(time.RFC3339))
		}
	}
	return out
}

// notes are the /readyz notes: conditions that do not make heartbeatd unready but need an operator.
func (d *daemon) notes() map[string]string {
	notes := d.eviction.notes()
	if n, at := d.store.DataLost(); n > 0 && d.clock.Now().Before(at.Add(dataLostNoted)) {
		if notes == nil {
			notes = map[string]string{}
		}
		notes["redis_data"] = fmt.Sprintf("Redis lost heartbeatd's data (noticed %s): devices silent since before then are not "+
			"watched until they signal again, and the open incidents, registered devices and parked events written "+
			"before then are gone; run Redis with persistence", at.UTC().Format(time.RFC3339))
	}
	return notes
}

// dataLostNoted is how long /readyz names a loss of Redis's data (heartbeatd_redis_data_lost_total
// counts them all).
const dataLostNoted = time.Hour

// prepare waits for Redis (retrying with backoff, so heartbeatd may start before it), registers the
// types, brings the slot layout in line with redis.slots and notices a service outage for the hold-back.
func (d *daemon) prepare(ctx context.Context) error {
	return loop.Retry(ctx, loop.RetryOptions{Backoff: loop.Backoff{Min: 200 * time.Millisecond, Max: 5 * time.Second},
		Permanent: func(err error) bool {
			return errors.Is(err, deadline.ErrHalving) || errors.Is(err, holdback.ErrReplicaInUse)
		},
		OnError: func(err error, _ int, retryIn time.Duration) {
			d.log.Warn("waiting for Redis", zap.Strings("addrs", d.cfg.Redis.Addrs), zap.Error(err), zap.Duration("retry_in", retryIn))
		}}, d.prepareOnce)
}

func (d *daemon) prepareOnce(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := d.store.Ping(ctx); err != nil {
		return err
	}
	if err := d.store.Load(ctx, d.policies.Load().Names()...); err != nil {
		return err
	}
	layout, err := d.store.SyncLayout(ctx, d.cfg.Redis.Slots)
	if err != nil {
		return err
	}
	if layout.Slots != d.cfg.Redis.Slots {
		d.log.Warn("the fleet runs more slots than redis.slots says; following the fleet", zap.Int("slots", layout.Slots),
			zap.Int("redis.slots", d.cfg.Redis.Slots))
	}
	if err := d.silences.Load(ctx); err != nil {
		return err
	}
	// The offset first: the hold-back's first windows and alive mark are on the shared clock. A Redis
	// that refuses TIME (a renamed command) would never answer otherwise: start on the local clock, and
	// the unmeasured offset keeps this replica from claiming (bounded by max_hold_back, then degraded).
	var refused redis.Error
	if err := d.clock.Measure(ctx); errors.As(err, &refused) {
		d.log.Error("Redis refuses TIME: the clock offset cannot be measured", zap.Error(err))
	} else if err != nil {
		return err
	}
	return d.holdBack.Start(ctx)
}

// run starts the HTTP server at once (health and readiness answer while Redis is awaited), then every
// component; ingest stops first at shutdown, then the chain flushes, then scanners, ownership, and last
// the server, publisher and Redis.
func (d *daemon) run(ctx context.Context) error {
	serveErr := make(chan error, 1)
	stopHealth := d.health.Start(ctx) // /readyz answers from it, also while Redis is awaited
	go func() { serveErr <- d.server.Serve(d.listener) }()
	d.log.Info("http listening", zap.String("addr", d.listener.Addr().String()))
	stopServer := func() error {
		stopHealth()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err := d.server.Shutdown(sctx)
		if serr := <-serveErr; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = serr
		}
		return err
	}

	if err := d.prepare(ctx); err != nil {
		err = errors.Join(err, stopServer())
		d.closeClients()
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}

	wake := make(chan struct{}, 1)
	scanner := deadline.NewScanner(deadline.ScannerOptions{Store: d.store, Slots: d.ownership.Slots, Handle: d.handler.Handle,
		Watermark: d.holdBack.WatermarkFor, Now: d.clock.Now, MaxIdleWait: d.cfg.Detection.MaxIdleWait, Lease: d.cfg.Detection.Lease,
		Batch: d.cfg.Detection.Batch, Concurrency: d.cfg.Detection.Scanners, Logger: d.log, Wake: wake})

	lc := &lifecycle{log: d.log}
	lc.onClose("redis and kafka clients", func() error { d.closeClients(); return nil })
	lc.onClose("http", stopServer)
	lc.add("http", func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return nil
		case err := <-serveErr:
			serveErr <- err // for stopServer
			return fmt.Errorf("http: %w", err)
		}
	})
	lc.add("kafka topics", d.ensureTopics)
	lc.add("silences", d.silences.Run)
	if d.correlator != nil {
		lc.add("correlator", d.correlator.Run)
	}
	for _, o := range d.outputs { // before the scanner, so they stop after it and see its last events
		lc.add(o.name, o.run)
	}
	lc.add("device counts", func(ctx context.Context) error {
		return d.metrics.RunCounts(ctx, alarm.CountsOptions{Store: d.store, Slots: d.ownership.Slots,
			Types: func() []string { return d.policies.Load().Names() }, Logger: d.log})
	})
	lc.add("redis eviction policy", d.eviction.run)
	lc.add("per-device timeouts", d.syncOverrides)
	lc.add("config reloads", d.reloads)
	lc.add("ownership", d.ownership.Run)
	lc.add("clock", d.clock.Run)
	lc.add("hold-back", d.holdBack.Run)
	lc.add("scanner wake-ups", func(ctx context.Context) error { return d.forwardWakeUps(ctx, wake) })
	lc.add("scanner", scanner.Run)
	// After the scanner, so it stops first: a watchdog event must not outlive the path it vouches for.
	lc.add("watchdog", alarm.NewWatchdog(alarm.WatchdogOptions{ReplicaID: d.replica, Every: d.cfg.Detection.WatchdogEvery,
		Handler: d.handler, Alive: scanner.LastWakeUp, MaxQuiet: d.cfg.Detection.WatchdogEvery + d.cfg.Detection.MaxIdleWait,
		Now: d.clock.Now, Logger: d.log}).Run)
	lc.add("dormant sweep", deadline.NewSweeper(deadline.SweeperOptions{Store: d.store, Slots: d.ownership.Slots,
		Every: d.cfg.Detection.SweepEvery, ForgetAfter: d.cfg.Retention.ForgetAfter,
		Forgotten: func(n int) { d.metrics.Forgotten.Add(float64(n)) }, Logger: d.log}).Run)
	lc.add("ingest chain", d.chain.Run)
	for _, src := range d.sources {
		lc.add("ingest "+src.Name(), func(ctx context.Context) error { return src.Run(ctx, d.chain) })
	}
	if d.opts.Started != nil {
		d.opts.Started(d.listener.Addr().String())
	}
	d.log.Info("heartbeatd running", zap.Int("slots", d.store.Slots()), zap.Int("sources", len(d.sources)))
	return lc.run(ctx, d.cfg.ShutdownTimeout)
}

// reloads applies SIGHUPs; POST /-/reload calls the coordinator directly.
func (d *daemon) reloads(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.opts.Reload:
			_ = d.coord.Reload() // logged and counted by the coordinator
		}
	}
}

// forwardWakeUps ends a scanner's sleep when its slots change or hold-back starts or ends, and keeps
// slots_owned current.
func (d *daemon) forwardWakeUps(ctx context.Context, wake chan<- struct{}) error {
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.ownership.Changed():
			d.slotsOwned.Set(float64(len(d.ownership.Slots())))
			poke()
		case <-d.holdBack.Changed():
			poke()
		}
	}
}

func (d *daemon) closeClients() {
	if d.publisher != nil {
		if err := d.publisher.Close(); err != nil {
			d.log.Warn("closing the event producer", zap.Error(err))
		}
	}
	if d.rdb != nil {
		_ = d.rdb.Close()
	}
	if d.listener != nil && d.server == nil {
		_ = d.listener.Close()
	}
}

// redisLogger hands go-redis's log lines to zap.
type redisLogger struct{ log *zap.SugaredLogger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) { l.log.Debugf(format, v...) }

// clusterStateReload bounds how long a Redis Cluster client keeps sending to a master that died: go-redis
// reloads the slots' owners only on a redirect or after ClusterStateReloadInterval (60s by default),
// and a dead master answers no redirect, so the deadline writes to its slots failed for a minute after
// its replica took over (go-redis issue 3979). A reload is one CLUSTER SLOTS, at most this often.
const clusterStateReload = time.Second

// newRedisClient is redis.NewUniversalClient with clusterStateReload for a cluster (several addresses).
func newRedisClient(o *redis.UniversalOptions) redis.UniversalClient {
	if len(o.Addrs) <= 1 {
		return redis.NewUniversalClient(o)
	}
	c := o.Cluster()
	c.ClusterStateReloadInterval = clusterStateReload
	return redis.NewClusterClient(c)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// newLogger builds the zap logger log.* asks for.
func newLogger(c config.Log) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	zc := zap.NewProductionConfig()
	if c.Format == "console" {
		zc = zap.NewDevelopmentConfig()
		zc.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
	}
	zc.Level = zap.NewAtomicLevelAt(level)
	zc.EncoderConfig.TimeKey = "ts"
	zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	zc.DisableStacktrace = true
	return zc.Build()
}
