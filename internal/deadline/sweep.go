package deadline

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/defaults"
	"github.com/heartbeatd/heartbeatd/internal/loop"
)

// The dormant sweep closes the one gap the recovery probe leaves (Refresh): a process that dies between
// a refresh's ZADD and its probe leaves the device back in the deadlines set while its incident's alarm
// entry stays where it was. An incident with an act ahead (a repeat, a silence's end) finds the device
// back at that act; a dormant one (doc.go) has none, so nothing would ever report its recovery. Each
// slot's owner looks over its slot's dormant alarm entries every SweeperOptions.Every and makes those
// whose device is back due at once; the scanner then reports `recovered` as after a probe, within Every
// and one pass of the signal. A pass costs Redis about a microsecond per alarm entry of the slot, almost
// all of it ZSCAN (BenchmarkSweepDormant).

// wakeDormantScript makes dormant alarm entries due now, each only if it is still dormant: between the
// sweep's read and this call the entry may have been claimed and leased, and a leased entry made due
// would be handed out twice.
//
// KEYS[1] alarms
// ARGV[1] now (ms), then the devices
// Reply: how many entries it made due.
var wakeDormantScript = newScript(`
local n = 0
for i = 2, #ARGV do
  local sc = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[i]))
  if sc and sc >= ${DormantAfter} then
    redis.call('ZADD', KEYS[1], ARGV[1], ARGV[i])
    n = n + 1
  end
end
return n
`)

// sweepDormant sweeps one page of slot's alarms set: a ZSCAN step from cursor reading about count
// entries, one ZMSCORE of the dormant ones in the deadlines set (and, while a doubling settles, in the
// devices' new slots), and for the devices found there a wakeDormantScript call. It returns the cursor
// of the next page (0 when the slot is done) and how many incidents it made due. A ZSCAN pass returns
// every entry present for the whole pass, so every incident dormant since a pass began is looked at by
// the end of it.
func (s *Store) sweepDormant(ctx context.Context, slot int, cursor uint64, count int) (next uint64, woken int, err error) {
	entries, next, err := s.rdb.ZScan(ctx, s.keys.alarms(slot), cursor, "", int64(count)).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("deadline: sweep slot %d: %w", slot, err)
	}
	var dormant []string
	for i := 0; i+1 < len(entries); i += 2 {
		// Scores come as Redis formats them (%.17g); an in-flight record is never dormant.
		if sc, err := strconv.ParseFloat(entries[i+1], 64); err == nil && sc >= dormantAfter {
			dormant = append(dormant, entries[i])
		}
	}
	if len(dormant) == 0 {
		return next, 0, nil
	}
	back, err := s.backInDeadlines(ctx, slot, dormant)
	if err != nil || len(back) == 0 {
		return next, 0, err
	}
	args := append([]any{s.now().UnixMilli()}, back...)
	n, err := wakeDormantScript.Run(ctx, s.rdb, []string{s.keys.alarms(slot)}, args...).Int()
	if err != nil {
		return 0, 0, fmt.Errorf("deadline: sweep slot %d: %w", slot, err)
	}
	return next, n, nil
}

// backInDeadlines returns those of devices (with an incident in slot) that are back in the deadlines
// set: they signalled since. While a doubling settles, a device's new slot is looked at too. One ZMSCORE
// per slot, one round trip.
func (s *Store) backInDeadlines(ctx context.Context, slot int, devices []string) ([]any, error) {
	if len(devices) == 0 {
		return nil, nil
	}
	layout := s.layout.Load()
	bySlot := map[int][]int{}
	for i, dev := range devices {
		bySlot[slot] = append(bySlot[slot], i)
		if now := Slot(dev, layout.Slots); now != slot {
			bySlot[now] = append(bySlot[now], i)
		}
	}
	back := make([]bool, len(devices))
	err := s.deadlineScores(ctx, bySlot, func(i int) string { return devices[i] }, func(i int, _ float64) { back[i] = true })
	if err != nil {
		return nil, fmt.Errorf("deadline: slot %d: devices back: %w", slot, err)
	}
	return kept[any](devices, back), nil
}

// defaultSweepPage is the ZSCAN COUNT of one sweep step: each step blocks Redis for about a millisecond
// (BenchmarkSweepDormant).
const defaultSweepPage = 1000

// SweeperOptions configures a Sweeper.
type SweeperOptions struct {
	Store *Store
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
	// interruption is older than it (pruneFlaps): no type would count them again. nil = histories are
	// left as they are (only deletes and retention remove them).
	FlapWindow func() time.Duration
	// Share is the share of Redis's time the replicas' passes may take together (default
	// loop.DefaultWalkShare; this one's is scaled by the slots it owns, loop.Pacer.Of): a pass over a
	// large slot is spread out rather than made faster, so it may outlast Every, and Every then bounds
	// nothing (docs/scaling.md, "Walks").
	Share  float64
	Logger *zap.Logger
}

// forgetEvery is how often the retention pass runs: it reads every open incident of the owned slots.
const forgetEvery = 10 * time.Minute

// Sweeper runs the dormant sweep over the slots this replica owns.
type Sweeper struct {
	opts       SweeperOptions
	log        *zap.Logger
	lastForget time.Time
	// flapCursor is where each slot's walk over its flap histories goes on at the next pass.
	flapCursor map[int]uint64
}

// NewSweeper returns a sweeper; Run starts it.
func NewSweeper(opts SweeperOptions) *Sweeper {
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
// failed (parents.go), names the linked parents again after a data loss (parentrepair.go), and forgets
// long-silent devices when that is due.
func (w *Sweeper) pass(ctx context.Context) error {
	if err := w.sweep(ctx); err != nil {
		return err
	}
	if err := w.opts.Store.payUnlinks(ctx); err != nil {
		return err
	}
	if repaired, err := w.opts.Store.repairNamedParents(ctx); err != nil {
		return err
	} else if repaired {
		w.log.Info("named every linked parent again after Redis lost data: gateway storms wake only the children of named parents again")
	}
	now := w.opts.Store.now()
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
				next, gone, err = w.opts.Store.forgetSilent(ctx, slot, cursor, w.opts.Page, before)
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
				next, woken, err = w.opts.Store.sweepDormant(ctx, slot, cursor, w.opts.Page)
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
	before := w.opts.Store.now().Add(-w.opts.FlapWindow())
	var next uint64
	var pruned int
	err := pace.Step(ctx, func() (err error) {
		next, pruned, err = w.opts.Store.pruneFlaps(ctx, slot, w.flapCursor[slot], w.opts.Page, before)
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

// wakeParked makes due the parked claims of slot whose device signalled again (Store.wakeParked).
func (w *Sweeper) wakeParked(ctx context.Context, slot int, pace loop.Pacer) error {
	for cursor := uint64(0); ; {
		var next uint64
		var woken int
		err := pace.Step(ctx, func() (err error) {
			next, woken, err = w.opts.Store.wakeParked(ctx, slot, cursor, w.opts.Page)
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
