// Package daemon builds heartbeatd's components from its configuration, runs them as one group and
// stops them in order; it also serves the HTTP API and metrics. It wires the signal path (internal/ingest),
// the store and its loops (internal/deadline), the hold-back (internal/holdback), the alarm loop
// (internal/alarm) with the silences and the correlator, the event publisher and the outputs together, and
// re-implements none of them.
package daemon

import (
	"context"
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

	"github.com/heartbeatd/heartbeatd/internal/alarm"
	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/correlate"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/eventkafka"
	"github.com/heartbeatd/heartbeatd/internal/history"
	"github.com/heartbeatd/heartbeatd/internal/holdback"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/internal/notify"
	"github.com/heartbeatd/heartbeatd/internal/scan"
	"github.com/heartbeatd/heartbeatd/internal/silence"
	"github.com/heartbeatd/heartbeatd/internal/sweep"
	"github.com/heartbeatd/heartbeatd/pkg/event"
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
// the insecure settings and deprecated keys `run` would warn about.
func CheckConfig(path string, env func(string) (string, bool)) (string, error) {
	cfg, err := config.LoadEnv(path, env)
	if err != nil {
		return "", err
	}
	notifyTable, err := checkNotify(cfg)
	if err != nil {
		return "", err
	}
	out := cfg.PolicyTable() + "\n" + cfg.CorrelationTable() + cfg.PresenceTable() + scheduleTable(cfg) + "\n" + cfg.AccessTable() +
		"\n" + notifyTable
	// Deprecations too: check-config is where an upgrade is checked, before `run` logs them.
	for i, w := range append(cfg.Warnings(), cfg.Deprecations()...) {
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
	if err := notify.Check(cfg.Notify); err != nil { // also when another process runs the notifier
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
	publisher *eventkafka.Publisher
	silences  *silence.Silences
	metrics   *alarm.Metrics
	forgotten prometheus.Counter // heartbeatd_devices_forgotten_total, which retention feeds
	ownership *scan.Ownership
	holdBack  *holdback.Tracker
	// correlator groups interruptions into outages; nil while correlation is off.
	correlator *correlate.Correlator
	handler    *alarm.Handler
	history    *history.Store // the incidents recorded from the published events
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
	// notifier pages people from the events topic; nil unless notify.enabled.
	notifier *notify.Notifier

	slotsOwned prometheus.Gauge
	// incarnation tells this process from the replica's earlier ones (holdback.Options).
	incarnation string
}

// timeout is a type's silence timeout under the current policies (unknown names get default's).
func (d *daemon) timeout(typeName string) time.Duration {
	p, _ := d.policies.Load().Lookup(typeName)
	return p.Timeout
}

// warnAfter is deadline.Options.WarnAfter: a type's warn_after under the current policies (0: none).
func (d *daemon) warnAfter(typeName string) time.Duration {
	return d.policies.Load().WarnAfter(typeName)
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

// forget counts the devices retention forgot and removes their incident history, as a deletion does.
func (d *daemon) forget(ctx context.Context, devices []string) {
	d.forgotten.Add(float64(len(devices)))
	if err := d.history.Forget(ctx, devices); err != nil {
		d.log.Error("forgotten devices keep their incident history until it expires", zap.Int("devices", len(devices)), zap.Error(err))
	}
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
		if why := d.unready(src); why != "" {
			out[src.Name()] = errors.New(why)
		}
	}
	return out
}

// notes are the /readyz notes: conditions that do not make heartbeatd unready but need an operator.
func (d *daemon) notes() map[string]string {
	notes := d.eviction.notes()
	for _, src := range d.sources {
		if note := d.groupNote(src, d.clock.Now()); note != "" {
			if notes == nil {
				notes = map[string]string{}
			}
			notes[src.Name()+"_group"] = note
		}
	}
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
			// A slot count the fleet cannot adopt is the config's fault: waiting would never end.
			return errors.Is(err, deadline.ErrHalving) || errors.Is(err, deadline.ErrStepTooLarge) || errors.Is(err, holdback.ErrReplicaInUse)
		},
		OnError: func(err error, _ int, retryIn time.Duration) {
			d.log.Warn("waiting for Redis", zap.Strings("addrs", d.cfg.Redis.Addrs), zap.Error(err), zap.Duration("retry_in", retryIn))
		}}, d.prepareOnce)
}

func (d *daemon) prepareOnce(parent context.Context) error {
	ctx, cancel := context.WithTimeout(parent, 5*time.Second)
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
	// Without the 5 s bound: a large registry of the old layout takes longer, and resumes where it stopped.
	moved, err := d.store.Registry().Migrate(parent)
	if moved > 0 {
		d.log.Info("moved registrations to the registry's current layout", zap.Int("devices", moved))
	}
	if err != nil {
		return err
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
	scanner := scan.NewScanner(scan.ScannerOptions{Store: d.store, Slots: d.ownership.Slots, Handle: d.handler.Handle,
		Watermark: d.holdBack.WatermarkFor, HeardAfter: d.holdBack.HeardAfter, Now: d.clock.Now, MaxIdleWait: d.cfg.Detection.MaxIdleWait,
		Lease: d.cfg.Detection.Lease, Batch: d.cfg.Detection.Batch, Concurrency: d.cfg.Detection.Scanners, Logger: d.log, Wake: wake})

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
	if d.notifier != nil { // reads the events topic: what it has not committed at the stop is read again
		lc.add("notifier", d.notifier.Run)
	}
	lc.add("incident history", d.recordHistory) // reads the events topic, as the notifier
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
	lc.add("dormant sweep", sweep.New(sweep.Options{Store: d.store, Slots: d.ownership.Slots,
		Every: d.cfg.Detection.SweepEvery, ForgetAfter: d.cfg.Retention.ForgetAfter,
		FlapWindow: func() time.Duration { return d.policies.Load().LongestFlapWindow() },
		Forgotten:  d.forget, Logger: d.log}).Run)
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
