package daemon

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/loop"
)

// defaultHealthInterval is how often the readiness checks run. It bounds how stale /readyz is, and the
// load its checks put on Redis and Kafka (one ping, one broker dial with TLS and SASL) however often it
// is asked.
const defaultHealthInterval = 2 * time.Second

var errStopping = errors.New("shutting down")

// Readiness is one round of readiness checks.
type Readiness struct {
	// Checks names every dependency; a nil error means it is working.
	Checks map[string]error
	At     time.Time
}

// ready reports whether every check passed.
func (r Readiness) ready() bool {
	for _, err := range r.Checks {
		if err != nil {
			return false
		}
	}
	return true
}

// HealthOptions configures newHealth.
type HealthOptions struct {
	Interval time.Duration // between rounds; default defaultHealthInterval
	Timeout  time.Duration // bound on one round; default Interval
	Logger   *zap.Logger
}

// Health runs the readiness checks in the background and keeps the last round, so /readyz answers from
// memory: a flood of probes never turns into dials and pings.
type Health struct {
	check func(ctx context.Context) map[string]error
	opts  HealthOptions
	log   *zap.Logger
	last  atomic.Pointer[Readiness]
}

// newHealth returns a Health running check; Start runs it.
func newHealth(check func(ctx context.Context) map[string]error, opts HealthOptions) *Health {
	if opts.Interval <= 0 {
		opts.Interval = defaultHealthInterval
	}
	if opts.Timeout <= 0 {
		opts.Timeout = opts.Interval
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &Health{check: check, opts: opts, log: opts.Logger.With(zap.String("component", "health"))}
}

// current is the last round of checks; false before the first one finished.
func (h *Health) current() (Readiness, bool) {
	r := h.last.Load()
	if r == nil {
		return Readiness{}, false
	}
	return *r, true
}

// Start runs one round of checks, so /readyz served after it never answers from nothing, then runs a
// round every Interval in a goroutine until ctx is done or stop is called; stop waits for it to end.
// From then on the checks report "heartbeatd": shutting down.
// The first round delays the caller by at most Timeout.
func (h *Health) Start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	h.refresh(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		loop.Every(ctx, loop.Options{Interval: h.opts.Interval}, func(ctx context.Context) error {
			h.refresh(ctx)
			return nil
		})
		// Stopping: orchestrators must stop sending work before the server goes, not read the last "ok".
		h.last.Store(&Readiness{Checks: map[string]error{"heartbeatd": errStopping}, At: time.Now()})
	})
	return func() {
		cancel()
		wg.Wait()
	}
}

func (h *Health) refresh(parent context.Context) {
	ctx, cancel := context.WithTimeout(parent, h.opts.Timeout)
	defer cancel()
	next := &Readiness{Checks: h.check(ctx), At: time.Now()}
	if parent.Err() != nil {
		return // shutting down: the round was cut short, not failed
	}
	prev := h.last.Swap(next)
	// /readyz shows the reasons only to callers with the token: the log carries every change.
	for name, err := range next.Checks {
		var was error
		known := prev != nil
		if known {
			was = prev.Checks[name]
		}
		switch {
		case err != nil && (!known || was == nil):
			h.log.Warn("not ready", zap.String("check", name), zap.Error(err))
		case err == nil && known && was != nil:
			h.log.Info("ready again", zap.String("check", name))
		}
	}
}
