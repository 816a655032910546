package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/holdback"
	"github.com/heartbeatd/heartbeatd/internal/kafkaclient"
	"github.com/heartbeatd/heartbeatd/internal/notify"
)

// newNotifier builds the notifier of cfg (docs/notifications.md) on a Redis client, a labels lookup and
// the shared clock: the same in the daemon and in `heartbeatd notify`.
func newNotifier(cfg *config.Config, rdb redis.UniversalClient, store *deadline.Store, now func() time.Time, log *zap.Logger,
	reg prometheus.Registerer) (*notify.Notifier, error) {
	k := cfg.Events.Kafka
	dialer, err := eventsDialer(k)
	if err != nil {
		return nil, err
	}
	var labels func(context.Context, []string) ([]map[string]string, error)
	if store != nil {
		labels = store.Registry().Labels
	}
	return notify.New(notify.Options{Notify: cfg.Notify, Brokers: k.Brokers, Topic: k.Topic,
		Dialer: dialer, Redis: rdb, KeyPrefix: cfg.Redis.KeyPrefix, Labels: labels, Now: now, Logger: log, Registerer: reg})
}

// eventsDialer reaches events.kafka as its tls and sasl blocks say, for the consumer groups of the events
// topic (the notifier's, the history's).
func eventsDialer(k config.EventsKafka) (*kafka.Dialer, error) {
	tlsCfg, err := k.TLS.Build()
	if err != nil {
		return nil, fmt.Errorf("events.kafka.tls: %w", err)
	}
	mech, err := kafkaclient.SASLMechanism(k.SASL.MechanismName, k.SASL.Username, k.SASL.Password)
	if err != nil {
		return nil, fmt.Errorf("events.kafka.sasl: %w", err)
	}
	return &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, TLS: tlsCfg, SASLMechanism: mech}, nil
}

// recordHistory records the incident history from its consumer group of the events topic until ctx ends.
func (d *daemon) recordHistory(ctx context.Context) error {
	k := d.cfg.Events.Kafka
	dialer, err := eventsDialer(k)
	if err != nil {
		return err
	}
	return d.history.Consume(ctx, kafkaclient.Group{Brokers: k.Brokers, Topic: k.Topic, ID: d.cfg.History.GroupID, Dialer: dialer,
		Logger: d.log})
}

// checkNotify is check-config's part for notify: every template and matcher compiled, and the table.
func checkNotify(cfg *config.Config) (string, error) {
	if err := notify.Check(cfg.Notify); err != nil {
		return "", err
	}
	return cfg.NotifyTable(), nil
}

// NotifyOptions start `heartbeatd notify`.
type NotifyOptions struct {
	ConfigPath string
	Env        func(string) (string, bool)
	Build      BuildInfo
	// HTTPListen serves /metrics and /healthz of the notifier.
	HTTPListen string
	Logger     *zap.Logger
	// Started, when set, is called with the HTTP address once the notifier runs.
	Started func(httpAddr string)
}

// notifyProcess is what `heartbeatd notify` runs: Redis, the shared clock, the registry's labels and
// the notifier, with its metrics.
type notifyProcess struct {
	cfg      *config.Config
	log      *zap.Logger
	rdb      redis.UniversalClient
	clock    *holdback.Clock
	notifier *notify.Notifier
}

func openNotify(configPath string, env func(string) (string, bool), logger *zap.Logger, reg prometheus.Registerer) (*notifyProcess, error) {
	cfg, err := config.LoadEnv(configPath, env)
	if err != nil {
		return nil, err
	}
	if len(cfg.Notify.Receivers) == 0 || len(cfg.Notify.Routes) == 0 {
		return nil, errors.New("notify: the configuration has no notify.receivers or notify.routes")
	}
	p := &notifyProcess{cfg: cfg, log: logger}
	if p.log == nil {
		if p.log, err = newLogger(cfg.Log); err != nil {
			return nil, err
		}
	}
	if p.rdb, err = newRedis(cfg); err != nil {
		return nil, err
	}
	p.clock = holdback.NewClock(holdback.ClockOptions{Client: p.rdb, MaxOffset: cfg.Detection.MaxClockOffset, Logger: p.log})
	// Only the registry's labels are read: no type policy is needed.
	store, err := deadline.New(p.rdb, deadline.Options{KeyPrefix: cfg.Redis.KeyPrefix, Slots: cfg.Redis.Slots, Now: p.clock.Now,
		Timeout: func(string) time.Duration { return config.BuiltinPolicy.Timeout }})
	if err == nil {
		p.notifier, err = newNotifier(cfg, p.rdb, store, p.clock.Now, p.log, reg)
	}
	if err != nil {
		_ = p.rdb.Close()
		return nil, err
	}
	return p, nil
}

// RunNotify runs the notifier alone until ctx ends: `heartbeatd notify`. It joins the same consumer group
// as a daemon with notify.enabled, so any mix of the two shares the events topic's partitions.
func RunNotify(ctx context.Context, opts NotifyOptions) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p, err := openNotify(opts.ConfigPath, opts.Env, opts.Logger, reg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", opts.HTTPListen)
	if err != nil {
		_ = p.rdb.Close()
		return fmt.Errorf("notify: -http: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	// /readyz answers from the last background round, so probes cost Redis and Kafka nothing; as on the
	// daemon's open /readyz, the reasons are in the log, not in the answer.
	health := newHealth(p.notifier.Ready, HealthOptions{Logger: p.log})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { notifyReadyz(w, health) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	p.log.Info("heartbeatd notify starting", zap.String("version", opts.Build.Version), zap.String("group_id", p.cfg.Notify.GroupID),
		zap.String("http", ln.Addr().String()))

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	lc := &lifecycle{log: p.log}
	lc.onClose("redis", func() error { return p.rdb.Close() })
	lc.onClose("http", func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	lc.add("http", func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return nil
		case err := <-serveErr:
			return fmt.Errorf("http: %w", err)
		}
	})
	lc.add("clock", func(ctx context.Context) error {
		if err := p.clock.Measure(ctx); err != nil {
			p.log.Warn("measuring the clock offset from Redis failed; retrying", zap.Error(err))
		}
		return p.clock.Run(ctx)
	})
	lc.add("notifier", p.notifier.Run)
	lc.add("health", func(ctx context.Context) error {
		stop := health.Start(ctx)
		<-ctx.Done()
		stop()
		return nil
	})
	if opts.Started != nil {
		opts.Started(ln.Addr().String())
	}
	return lc.run(ctx, p.cfg.ShutdownTimeout)
}

// NotifyTest sends a sample event to one receiver: `heartbeatd notify test --receiver NAME`.
func NotifyTest(ctx context.Context, configPath string, env func(string) (string, bool), receiver string) error {
	p, err := openNotify(configPath, env, zap.NewNop(), nil)
	if err != nil {
		return err
	}
	defer p.rdb.Close()
	return p.notifier.Test(ctx, receiver)
}

// notifyReadyz is `heartbeatd notify`'s /readyz: 200 when every check of Notifier.Ready passed, 503
// naming the failing ones (and "starting" before the first round).
func notifyReadyz(w http.ResponseWriter, health *Health) {
	rd, checked := health.current()
	if !checked {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "starting"})
		return
	}
	body := map[string]string{"status": "ready"}
	status := http.StatusOK
	for name, err := range rd.Checks {
		body[name] = "ok"
		if err != nil {
			body[name], body["status"], status = "not ready", "not ready", http.StatusServiceUnavailable
		}
	}
	writeJSON(w, status, body)
}
