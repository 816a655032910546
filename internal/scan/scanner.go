package scan

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/defaults"
	"github.com/heartbeatd/heartbeatd/internal/loop"
)

// ScannerOptions configures a Scanner.
type ScannerOptions struct {
	Store *deadline.Store
	// Slots returns the slots this replica owns now; it is asked on every wake-up.
	Slots func() []int
	// Handle receives each wake-up's claims. The scanner waits for it, so a slot's claims are never
	// handled twice at once by one replica. An error backs the scanner off; the claims stay leased and
	// come back when their lease runs out.
	Handle func(ctx context.Context, claims []deadline.Claim) error
	// Watermark returns what hold-back lets a claim at now take, per device timeout; nil = every passed
	// deadline.
	Watermark func(now time.Time) deadline.WatermarkFunc
	// HeardAfter returns deadline.ClaimOptions.HeardAfter at now: the end of the latest blind window that
	// still holds some devices back; nil = reported failures wait for their type's watermark like any
	// deadline.
	HeardAfter func(now time.Time) time.Time
	Now        func() time.Time // nil = time.Now
	// MaxIdleWait is the longest sleep when no earlier deadline is known (detection.max_idle_wait); it
	// also bounds how late a deadline written by another replica after the last claim is noticed.
	MaxIdleWait time.Duration
	Lease       time.Duration // detection.lease
	Batch       int           // detection.batch
	Logger      *zap.Logger
	// Wake, when it fires, ends the current sleep (slots changed, hold-back ended).
	Wake <-chan struct{}
	// OnError is told about every failed wake-up (for metrics); nil = ignore.
	OnError func(error)
	// Concurrency is how many claim loops run at once (detection.scanners), each over its own share of
	// the slots (slot mod Concurrency). One loop leaves Redis idle while it publishes and Kafka idle while
	// it claims; a few keep both busy. A slot always belongs to the same loop, so one device's claims are
	// still handled one at a time and its events stay in order. 0 = 1.
	Concurrency int
}

// Scanner finds the devices whose deadline passed in the slots this replica owns and hands them to the
// alarm loop. It sleeps exactly until the earliest known due time, capped by MaxIdleWait, and claims again
// at once after a full batch.
type Scanner struct {
	opts ScannerOptions
	log  *zap.Logger
	// woke[i] is when claim loop i last completed a wake-up (local Unix ns): the watchdog's proof that
	// every loop still claims.
	woke []atomic.Int64
}

// NewScanner returns a scanner; Run starts it.
func NewScanner(opts ScannerOptions) *Scanner {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Logger = cmp.Or(opts.Logger, zap.NewNop())
	opts.MaxIdleWait = defaults.Positive(opts.MaxIdleWait, config.DefaultMaxIdleWait)
	opts.Batch = defaults.Positive(opts.Batch, config.DefaultDetectionBatch)
	opts.Lease = defaults.Positive(opts.Lease, config.DefaultLease)
	return &Scanner{opts: opts, log: opts.Logger.With(zap.String("component", "scanner")),
		woke: make([]atomic.Int64, max(opts.Concurrency, 1))}
}

// LastWakeUp is when the slowest claim loop last completed a wake-up (its claim round trip, and the
// handling of what it claimed, succeeded), on the local clock; zero until every loop has completed one.
func (s *Scanner) LastWakeUp() time.Time {
	oldest := int64(0)
	for i := range s.woke {
		ns := s.woke[i].Load()
		if ns == 0 {
			return time.Time{}
		}
		if oldest == 0 || ns < oldest {
			oldest = ns
		}
	}
	return time.Unix(0, oldest)
}

// Run scans until ctx is done; it returns nil then.
func (s *Scanner) Run(ctx context.Context) error {
	n := max(s.opts.Concurrency, 1)
	var wg sync.WaitGroup
	wakes := make([]chan struct{}, n)
	for i := range wakes {
		wakes[i] = make(chan struct{}, 1)
		share := func() []int { return shareOf(s.opts.Slots(), i, n) }
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.loop(ctx, i, share, wakes[i])
		}()
	}
	// Every loop must hear a wake-up (slots changed, hold-back ended, children woken by their parent's
	// verdict), not just the first to read it.
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case <-s.opts.Wake:
		case <-s.opts.Store.Woken():
		}
		for _, w := range wakes {
			select {
			case w <- struct{}{}:
			default:
			}
		}
	}
}

// shareOf returns the slots of share i of n: those congruent to i mod n.
func shareOf(slots []int, i, n int) []int {
	out := make([]int, 0, len(slots)/n+1)
	for _, slot := range slots {
		if slot%n == i {
			out = append(out, slot)
		}
	}
	return out
}

// loop claims over the slots slotsOf returns until ctx is done; it is claim loop i.
func (s *Scanner) loop(ctx context.Context, i int, slotsOf func() []int, wake <-chan struct{}) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	backoff := loop.Backoff{Min: 10 * time.Millisecond, Max: time.Second}
	failing := false
	sched := newSlotSchedule()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-wake:
			sched.forget()
		}
		wait, err := s.wakeUp(ctx, slotsOf(), sched)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if s.opts.OnError != nil {
				s.opts.OnError(err)
			}
			if !failing {
				s.log.Error("claiming failed; backing off", zap.Error(err))
			}
			failing = true
			sched.forget()
			wait = backoff.Next()
		} else {
			if failing {
				s.log.Info("claiming works again")
			}
			failing = false
			backoff.Reset()
			s.woke[i].Store(time.Now().UnixNano())
		}
		timer.Reset(wait)
	}
}

// wakeUp claims the slots of owned that are due (slotSchedule), hands the claims over and returns how
// long to sleep. When every slot is to be looked at again, it peeks at the others (Store.Peek) and claims
// them only when something is due: most such looks in an idle fleet are the MaxIdleWait polls that bound
// how late a deadline written elsewhere is noticed, and find nothing.
func (s *Scanner) wakeUp(ctx context.Context, owned []int, sched *slotSchedule) (time.Duration, error) {
	if len(owned) == 0 {
		return s.opts.MaxIdleWait, nil
	}
	now := s.opts.Now()
	var wm deadline.WatermarkFunc
	if s.opts.Watermark != nil {
		wm = s.opts.Watermark(now)
	}
	opts := deadline.ClaimOptions{Now: now, WatermarkFor: wm, Lease: s.opts.Lease, Batch: s.opts.Batch}
	if s.opts.HeardAfter != nil {
		opts.HeardAfter = s.opts.HeardAfter(now)
	}
	due, others := sched.split(owned, now)
	stale := sched.stale(now, s.opts.MaxIdleWait)
	if stale && len(others) > 0 {
		peeked, res, err := s.opts.Store.Peek(ctx, others, opts)
		if err != nil {
			return 0, err
		}
		if peeked {
			due = owned
		} else {
			sched.learn(others, res.SlotNext)
		}
	}
	if len(due) > 0 {
		if err := s.claim(ctx, due, opts, sched); err != nil {
			return 0, err
		}
	}
	if stale {
		sched.looked = now
	}
	return sched.wait(owned, s.opts.Now(), s.opts.MaxIdleWait), nil
}

// claim claims slots, hands the claims over and records when each slot is due next.
func (s *Scanner) claim(ctx context.Context, slots []int, opts deadline.ClaimOptions, sched *slotSchedule) error {
	sched.claimed = opts.Now
	res, err := s.opts.Store.Claim(ctx, slots, opts)
	if err != nil {
		return err
	}
	sched.backlog = res.More
	if len(res.Claims) > 0 {
		if err := s.opts.Handle(ctx, res.Claims); err != nil {
			return err
		}
	}
	sched.learn(slots, res.SlotNext)
	return nil
}
