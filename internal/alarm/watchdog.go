package alarm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/defaults"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// WatchdogOptions configures a Watchdog.
type WatchdogOptions struct {
	ReplicaID string
	// Every is detection.watchdog_every (default config.DefaultWatchdogEvery).
	Every time.Duration
	// Handler publishes the event through its sink (hold-back's degraded mark, the Kafka publisher) and
	// counts it like a device event: the path of every alarm.
	Handler *Handler
	// Alive is when the scanner last completed a wake-up, on the local clock (Scanner.LastWakeUp). A tick
	// finding none within MaxQuiet publishes nothing: a scanner that stopped claiming is a silent
	// pipeline even while Kafka answers. nil = not checked.
	Alive func() time.Time
	// MaxQuiet is how long the scanner may go without a completed wake-up (default Every; the daemon adds
	// detection.max_idle_wait, the longest a healthy scanner sleeps).
	MaxQuiet time.Duration
	// Now is the shared clock the event's time and id are read from.
	Now    func() time.Time
	Logger *zap.Logger
}

// Watchdog publishes this replica's watchdog event every Every (docs/events.md), so consumers and the shipped
// alert rule (heartbeatd_watchdog_last_published_timestamp_seconds) notice a pipeline that went quiet
// end to end: the Prometheus Watchdog pattern.
type Watchdog struct {
	opts WatchdogOptions
	log  *zap.Logger
	// withheld and failed count ticks that published nothing (tests await them instead of sleeping).
	withheld, failed atomic.Int64
}

// errScannerQuiet is a tick withheld because the scanner completed no wake-up within MaxQuiet.
var errScannerQuiet = errors.New("alarm: watchdog withheld: the scanner completed no claim recently")

// NewWatchdog returns a watchdog; Run starts it.
func NewWatchdog(opts WatchdogOptions) *Watchdog {
	opts.Every = defaults.Positive(opts.Every, config.DefaultWatchdogEvery)
	opts.MaxQuiet = defaults.Positive(opts.MaxQuiet, opts.Every)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Logger = cmp.Or(opts.Logger, zap.NewNop())
	return &Watchdog{opts: opts, log: opts.Logger.With(zap.String("component", "watchdog"))}
}

// Run publishes a watchdog event every Every until ctx is done. The first goes out one interval after
// the start, when the scanner has had time to claim. A failed or withheld tick is logged when the state
// changes and retried at the next tick (with jitter), never sooner: the missing events are the signal.
func (w *Watchdog) Run(ctx context.Context) error {
	loop.Every(ctx, loop.Options{Interval: w.opts.Every, MaxBackoff: w.opts.Every,
		OnError: func(err error, failures int, _ time.Duration) {
			if failures == 1 {
				w.log.Warn("watchdog event not published; the pipeline-stale alert fires if this lasts", zap.Error(err))
			}
		},
		OnRecover: func(failures int) { w.log.Info("watchdog events published again", zap.Int("missed", failures)) }},
		w.tick)
	return nil
}

func (w *Watchdog) tick(ctx context.Context) error {
	if w.opts.Alive != nil {
		if last := w.opts.Alive(); last.IsZero() || time.Since(last) > w.opts.MaxQuiet {
			w.withheld.Add(1)
			return errScannerQuiet
		}
	}
	if err := w.opts.Handler.publishWatchdog(ctx, w.opts.ReplicaID, w.opts.Now()); err != nil {
		w.failed.Add(1)
		return err
	}
	return nil
}

// publishWatchdog publishes replica's watchdog event for the tick at through the handler's sink and,
// once Kafka acknowledged it, counts it (events_total{kind="watchdog"}) and sets
// watchdog_last_published_timestamp_seconds.
func (h *Handler) publishWatchdog(ctx context.Context, replica string, at time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, h.opts.Timeout)
	defer cancel()
	if err := h.opts.Sink.Publish(ctx, []event.Event{event.NewWatchdog(replica, at)})[0]; err != nil {
		return fmt.Errorf("alarm: publish the watchdog event: %w", err)
	}
	h.opts.Metrics.Events.WithLabelValues(string(event.Watchdog)).Inc()
	h.opts.Metrics.WatchdogPublished.Set(float64(h.opts.Now().UnixMilli()) / 1000)
	return nil
}
