package sweep

import (
	"cmp"
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/defaults"
	"github.com/heartbeatd/heartbeatd/internal/loop"
)

// defaultSweepPage is the ZSCAN COUNT of one sweep step: each step blocks Redis for about a millisecond
// (BenchmarkSweepDormant).
const defaultSweepPage = 1000

// Options configures a Sweeper.
type Options struct {
	Store *deadline.Store
	// Slots returns the slots this replica owns now; only a slot's owner sweeps it.
	Slots func() []int
	// Every is how often each owned slot is swept (default config.DefaultSweepEvery): the bound on how
	// late a recovery whose probe was lost (a crash between a refresh's two round trips) is reported.
	Every time.Duration
	// Page is the ZSCAN COUNT of one step (default 1000).
	Page int
	// ForgetAfter: devices silent this long and not registered are forgotten (retention.forget_after),
	// looked for at most every forgetEvery; 0 = never.
	ForgetAfter time.Duration
	// Forgotten is told which devices a pass forgot (a metric, the incident history); nil = none.
	Forgotten func(ctx context.Context, devices []string)
	// FlapWindow returns the longest flapping window of the configured types (0: no type detects
	// flapping). Each pass deletes, one page per owned slot, the interruption histories whose newest
	// interruption is older than it (flaps.Histories.Prune): no type would count them again. nil =
	// histories are left as they are (only deletes and retention remove them).
	FlapWindow func() time.Duration
	// Share is the share of Redis's time the replicas' passes may take together (default
	// loop.DefaultWalkShare; this one's is scaled by the slots it owns, loop.Pacer.Of): a pass over a
	// large slot is spread out rather than made faster, so it may outlast Every, and Every then bounds
	// nothing (docs/scaling.md, "Walks").
	Share  float64
	Logger *zap.Logger
}

// NewForgottenCounter is heartbeatd_devices_forgotten_total, for Options.Forgotten to add to,
// registered with reg (nil = not registered).
func NewForgottenCounter(reg prometheus.Registerer) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "heartbeatd", Name: "devices_forgotten_total",
		Help: "Devices forgotten after retention.forget_after of silence, not being registered."})
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}

// forgetEvery is how often the retention pass runs: it reads every open incident of the owned slots.
const forgetEvery = 10 * time.Minute

// Sweeper runs the dormant sweep over the slots this replica owns.
type Sweeper struct {
	opts       Options
	log        *zap.Logger
	lastForget time.Time
	// flapCursor is where each slot's walk over its flap histories goes on at the next pass.
	flapCursor map[int]uint64
}

// New returns a sweeper; Run starts it.
func New(opts Options) *Sweeper {
	opts.Every = defaults.Positive(opts.Every, config.DefaultSweepEvery)
	opts.Page = defaults.Positive(opts.Page, defaultSweepPage)
	opts.Share = defaults.Positive(opts.Share, loop.DefaultWalkShare)
	opts.Logger = cmp.Or(opts.Logger, zap.NewNop())
	return &Sweeper{opts: opts, log: opts.Logger.With(zap.String("component", "sweeper")), flapCursor: map[int]uint64{}}
}

// Run sweeps every owned slot every Every until ctx is done; it returns nil then. A failed pass is
// retried with backoff (Redis down is reported by the scanner and /readyz, not here).
func (w *Sweeper) Run(ctx context.Context) error {
	loop.Every(ctx, loop.Options{Interval: w.opts.Every, MaxBackoff: 4 * w.opts.Every,
		OnError: func(err error, failures int, retryIn time.Duration) {
			if failures == 1 {
				w.log.Warn("sweeping dormant incidents failed; retrying", zap.Error(err), zap.Duration("retry_in", retryIn))
			}
		}}, w.pass)
	return nil
}

// pass sweeps every owned slot once, prunes a page of each one's flap histories, does the unlinks Redis
// failed (Store.PayUnlinks), names the linked parents again after a data loss (Store.RepairNamedParents),
// and forgets long-silent devices when that is due.
func (w *Sweeper) pass(ctx context.Context) error {
	if err := w.sweep(ctx); err != nil {
		return err
	}
	if err := w.opts.Store.Links().PayUnlinks(ctx); err != nil {
		return err
	}
	if repaired, err := w.opts.Store.Links().RepairNamedParents(ctx); err != nil {
		return err
	} else if repaired {
		w.log.Info("named every linked parent again after Redis lost data: gateway storms wake only the children of named parents again")
	}
	now := w.opts.Store.Now()
	if w.opts.ForgetAfter <= 0 || now.Sub(w.lastForget) < forgetEvery {
		return nil
	}
	if err := w.forget(ctx, now.Add(-w.opts.ForgetAfter)); err != nil {
		return err
	}
	w.lastForget = now
	return nil
}

// forget forgets, in every owned slot, the unregistered devices silent since before.
func (w *Sweeper) forget(ctx context.Context, before time.Time) error {
	slots := w.opts.Slots()
	pace := w.pacer(len(slots))
	for _, slot := range slots {
		for cursor := uint64(0); ; {
			var next uint64
			var gone []string
			err := pace.Step(ctx, func() (err error) {
				next, gone, err = w.opts.Store.ForgetSilent(ctx, slot, cursor, w.opts.Page, before)
				return err
			})
			if err != nil {
				return err
			}
			if len(gone) > 0 {
				w.log.Info("forgot devices silent longer than retention.forget_after and not registered",
					zap.Int("slot", slot), zap.Int("devices", len(gone)), zap.Strings("sample", gone[:min(len(gone), 10)]))
				if w.opts.Forgotten != nil {
					w.opts.Forgotten(ctx, gone)
				}
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	return nil
}

// sweep sweeps every owned slot's dormant incidents once.
func (w *Sweeper) sweep(ctx context.Context) error {
	slots := w.opts.Slots()
	pace := w.pacer(len(slots))
	for _, slot := range slots {
		for cursor := uint64(0); ; {
			var next uint64
			var woken int
			err := pace.Step(ctx, func() (err error) {
				next, woken, err = w.opts.Store.SweepDormant(ctx, slot, cursor, w.opts.Page)
				return err
			})
			if err != nil {
				return err
			}
			if woken > 0 {
				w.log.Info("dormant incidents whose device is back made due (their recovery probe was lost)",
					zap.Int("slot", slot), zap.Int("incidents", woken))
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
		if err := w.wakeParked(ctx, slot, pace); err != nil {
			return err
		}
		if err := w.pruneFlaps(ctx, slot, pace); err != nil {
			return err
		}
	}
	return nil
}

// pruneFlaps deletes, in one page of slot's flap histories (Page fields, from where the last pass
// stopped), those older than the longest flapping window: a pass costs at most a page per slot, and a
// slot of n histories is looked over every n/Page passes.
func (w *Sweeper) pruneFlaps(ctx context.Context, slot int, pace loop.Pacer) error {
	if w.opts.FlapWindow == nil {
		return nil
	}
	before := w.opts.Store.Now().Add(-w.opts.FlapWindow())
	var next uint64
	var pruned int
	err := pace.Step(ctx, func() (err error) {
		next, pruned, err = w.opts.Store.Flaps().Prune(ctx, slot, w.flapCursor[slot], w.opts.Page, before)
		return err
	})
	if err != nil {
		return err
	}
	w.flapCursor[slot] = next
	if pruned > 0 {
		w.log.Debug("interruption histories older than every flapping window deleted", zap.Int("slot", slot), zap.Int("histories", pruned))
	}
	return nil
}

// pacer paces a walk over owned of the slots: the replicas' walks share opts.Share.
func (w *Sweeper) pacer(owned int) loop.Pacer {
	return loop.Pacer{Share: w.opts.Share}.Of(owned, w.opts.Store.Slots())
}

// wakeParked makes due the parked claims of slot whose device signalled again (Store.WakeParked).
func (w *Sweeper) wakeParked(ctx context.Context, slot int, pace loop.Pacer) error {
	for cursor := uint64(0); ; {
		var next uint64
		var woken int
		err := pace.Step(ctx, func() (err error) {
			next, woken, err = w.opts.Store.WakeParked(ctx, slot, cursor, w.opts.Page)
			return err
		})
		if err != nil {
			return err
		}
		if woken > 0 {
			w.log.Info("parked claims whose device signalled again made due: their recovery is reported",
				zap.Int("slot", slot), zap.Int("claims", woken))
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}
