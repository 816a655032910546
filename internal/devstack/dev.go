package devstack

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"

	"github.com/heartbeatd/heartbeatd/configs"
	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/daemon"
)

// DevOptions configure `heartbeatd dev`.
type DevOptions struct {
	HTTPListen string
	Build      daemon.BuildInfo
	Stdout     io.Writer
	Reload     <-chan struct{}
	// AnyPorts takes free ports instead of the well-known dev ones (tests).
	AnyPorts bool
	// Devices is the simulated fleet's size (0 = 300).
	Devices int
	// Started, when set, is called with the HTTP address once the daemon runs.
	Started func(httpAddr string)
}

// Dev runs in-process Redis, MQTT and Kafka servers, heartbeatd on them with configs/dev.yaml, a
// simulated fleet, and a console printer of the events, until ctx is done.
func Dev(ctx context.Context, opts DevOptions) error {
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	log := consoleLogger(opts.Stdout)
	defer func() { _ = log.Sync() }()

	stack, err := start(ctx, Options{Logger: log, AnyPorts: opts.AnyPorts})
	if err != nil {
		return err
	}
	defer stack.Close()

	// The dev config ships inside the binary; it is written out so SIGHUP can reload an edited copy.
	dir, err := os.MkdirTemp("", "heartbeatd-dev-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "dev.yaml")
	if err := os.WriteFile(path, configs.Dev, 0o600); err != nil {
		return err
	}
	kafka := strings.Join(stack.KafkaBrokers, ",")
	overrides := map[string]string{
		config.EnvName("redis.addrs"):                   stack.RedisAddr,
		config.EnvName("ingest.mqtt.brokers"):           stack.MQTTBroker,
		config.EnvName("ingest.kafka.brokers"):          kafka,
		config.EnvName("events.kafka.brokers"):          kafka,
		config.EnvName("http.listen"):                   opts.HTTPListen,
		config.EnvName("detection.max_idle_wait"):       "50ms",
		config.EnvName("redis.key_prefix"):              "hb",
		config.EnvName("cluster.replica_id"):            "dev",
		config.EnvName("ingest.mqtt.client_id"):         "heartbeatd-dev",
		config.EnvName("ingest.kafka.group_id"):         "heartbeatd-dev",
		config.EnvName("events.kafka.topic"):            topicEvents,
		config.EnvName("events.kafka.deadletter_topic"): topicDeadletter,
	}
	env := func(key string) (string, bool) {
		if v, ok := overrides[key]; ok && v != "" {
			return v, true
		}
		return os.LookupEnv(key)
	}

	g, gctx := errgroup.WithContext(ctx)
	started := make(chan string, 1)
	g.Go(func() error {
		return daemon.Run(gctx, daemon.Options{ConfigPath: path, Env: env, Build: opts.Build, Reload: opts.Reload, Logger: log,
			Started: func(addr string) { started <- addr }})
	})
	g.Go(func() error {
		var addr string
		select {
		case <-gctx.Done():
			return nil
		case addr = <-started:
		}
		fmt.Fprintf(opts.Stdout, "\n%s\n  config: %s (edit it and send SIGHUP to reload the types)\n\n", banner(stack, addr), path)
		if opts.Started != nil {
			opts.Started(addr)
		}
		fleet := FleetOptions{Broker: stack.MQTTBroker, Devices: opts.Devices, Logger: log}
		pg, pctx := errgroup.WithContext(gctx)
		pg.Go(func() error { return runFleet(pctx, fleet) })
		pg.Go(func() error { return runLastWill(pctx, stack.MQTTBroker, log) })
		pg.Go(func() error { return printEvents(pctx, stack.KafkaBrokers, topicEvents, log, time.Now()) })
		return pg.Wait()
	})
	err = g.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Simulate runs the dev fleet against an MQTT broker (for a heartbeatd started with `run`).
func Simulate(ctx context.Context, broker string, devices int) error {
	log := consoleLogger(os.Stdout)
	defer func() { _ = log.Sync() }()
	log.Info("simulating a fleet", zap.String("broker", config.RedactURL(broker)), zap.Int("devices", devices))
	err := runFleet(ctx, FleetOptions{Broker: broker, Devices: devices, Logger: log})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// consoleLogger is dev mode's readable log: info and up, short times, colours.
func consoleLogger(w io.Writer) *zap.Logger {
	ec := zap.NewDevelopmentEncoderConfig()
	ec.EncodeLevel = zapcore.CapitalColorLevelEncoder
	ec.EncodeTime = zapcore.TimeEncoderOfLayout(time.TimeOnly + ".000")
	ec.EncodeCaller = nil
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(ec), zapcore.AddSync(w), zapcore.InfoLevel)
	return zap.New(core)
}
