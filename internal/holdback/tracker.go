package holdback

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/defaults"
	"github.com/heartbeatd/heartbeatd/internal/loop"
)

// Probe is one ingest source as the hold-back sees it.
type Probe struct {
	Name string
	// Trouble reports whether the source delivers signals in time at now.
	Trouble func(now time.Time) ProbeTrouble
	// Floor, when set, is the latest deadline the source vouches for at now (all it read up to, plus
	// the lag it is allowed); zero = no bound. Watermark never passes it, so a lag counts from where it
	// began even before Trouble reports it. At most MaxHoldBack old, like every hold.
	Floor func(now time.Time) time.Time
}

// ProbeTrouble is what a probe reports.
type ProbeTrouble struct {
	// Since is since when the source has not delivered signals in time (disconnected, or its oldest
	// pending message waited too long), on the shared clock; zero when it is healthy. Why says what is
	// wrong.
	Since time.Time
	Why   string
	// Kept: the source's broker keeps every signal it did not deliver, and the source's Floor holds back
	// past what was read (a Kafka consumer behind or rebalancing), so the window needs no grace once the
	// trouble is over. A window that was not kept at any moment keeps its grace.
	Kept bool
}

// Options configures a Tracker.
type Options struct {
	Client redis.UniversalClient
	// KeyPrefix is redis.key_prefix ("" = its default); the tracker's keys are its own (keys.go).
	KeyPrefix string
	ReplicaID string
	// Probes become this replica's ingest windows ("ingest/<name>"), opened and closed at every tick.
	Probes []Probe
	// Shares are the parts of the signals this replica reads alone (member.go), advertised with its alive
	// mark; Incarnation tells this process from earlier ones of the same replica, so the others notice one
	// that died and came back between two of their ticks. MemberLapse: a replica carrying shares whose
	// last word is older than this is taken for dead (default max(Stall, 4×Interval)), and until it is,
	// nothing later than that word plus MemberLapse is claimed.
	Shares      []Share
	Incarnation string
	MemberLapse time.Duration
	// ClientIDs are the broker sessions this replica holds alone (its MQTT client id), advertised in its
	// entry: Start refuses to join while another live process holds one of them (duplicate.go).
	ClientIDs []string
	// Grace caps how long a window keeps holding a device after it closed, which is the device's own
	// timeout (Window.graceFor): detection.grace_after_outage, or the longest timeout of any type when
	// that is 0 (resolved by the caller); read whenever a window opens or closes, so a reload applies.
	Grace func() time.Duration
	// Timeouts are the configured types' timeouts, for the per-type hold in the status and the log; nil =
	// none shown.
	Timeouts func() map[string]time.Duration
	// Interval is how often probes are read and this replica's windows are shared (default 250ms).
	Interval time.Duration
	// DownAfter: a service-alive mark older than this at start-up means heartbeatd was not running
	// (default 2s; the mark is refreshed every Interval).
	DownAfter time.Duration
	// MaxHoldBack bounds every hold (detection.max_hold_back; default config.DefaultMaxHoldBack): a
	// window older than this no longer holds, and detection runs degraded while it lasts.
	MaxHoldBack time.Duration
	// Stall turns on the check for heartbeatd's own pauses (detection.stall): a gap longer than this
	// between two of its ticks is a window. 0 = off.
	Stall time.Duration
	// WriteFailure, when set, is since when Redis has refused this replica's deadline writes (the ingest
	// chain's, on the shared clock), zero while they succeed. Watermark opens the Redis window as soon as
	// it is set: a short outage may fall between two ticks, and the scanners may reach Redis again before
	// the retried writes land.
	WriteFailure func() time.Time
	// WriteTrouble, when set, is the latest span that is over in which writes were refused or went
	// unanswered (the chain's LastWriteTrouble, on the shared clock). A Redis that froze also blocked
	// every loop that would have seen WriteFailure meanwhile; the span still becomes a window.
	WriteTrouble func() (from, to time.Time)
	// ClockCheck, when set, says whether this replica's clock may be trusted (Clock.Check). While it
	// fails, Watermark claims nothing, for at most MaxHoldBack.
	ClockCheck func() error
	// Now is the shared clock (Clock.Now): every window, alive mark and staleness check uses it.
	Now    func() time.Time
	Logger *zap.Logger
	// OnChange is told whenever hold-back starts or ends, in order.
	OnChange func(active bool)
	// Registerer gets heartbeatd_hold_back, heartbeatd_hold_back_degraded and heartbeatd_hold_back_seconds;
	// nil = none.
	Registerer prometheus.Registerer
}

// Status is the hold-back state shown by /readyz, /v1/stats and the log.
type Status struct {
	// Active: some window holds detection back.
	Active bool `json:"active"`
	// Since is the earliest start of a holding window: deadlines later than it are not claimed while
	// Active.
	Since time.Time `json:"since,omitzero"`
	// Until is when the hold ends if nothing else goes wrong; zero while a holding window is open.
	Until  time.Time `json:"until,omitzero"`
	Reason string    `json:"reason,omitempty"`
	// Degraded: a window outlived detection.max_hold_back (or this replica's clock stayed too far off
	// that long) and detection runs regardless; events carry "degraded": true meanwhile.
	Degraded bool `json:"degraded,omitempty"`
	// Windows are every replica's windows that are open or in their grace, oldest first.
	Windows []Window `json:"windows,omitempty"`
	// ByType is how the windows hold each configured type that they hold: each device waits its own
	// timeout of visible time after a window.
	ByType map[string]TypeHold `json:"by_type,omitempty"`
	// Clock says why this replica claims nothing (its offset from Redis TIME); empty while it scans.
	Clock string `json:"clock,omitempty"`
}

// Tracker keeps heartbeatd from reporting devices as silent when it is heartbeatd that could not hear
// them. Every reason for that is a blind window (window.go): a source of any replica down or lagging,
// heartbeatd down or stalled, Redis refusing writes. Each replica shares its windows in Redis and every
// scanner honours all of them (Watermark), because with shared subscriptions and consumer groups one
// replica's blindness hides signals of any slot. No window holds longer than MaxHoldBack.
//
// Sources that know of further windows (a Kafka partition being rebalanced, a dead member's share) call
// Open and Close, or record for a span already over.
type Tracker struct {
	opts  Options
	keys  keyspace
	log   *zap.Logger
	stall *stallDetector // nil when Stall is 0

	mu         sync.Mutex
	local      []Window // this replica's
	remote     []Window // the other replicas', as last read from Redis
	lastShared time.Time
	troubleTo  time.Time // the end of the last write trouble recorded as a window
	clockBad   time.Time // since when ClockCheck fails; zero while it passes
	clockErr   error
	peers      map[string]entry       // the other replicas carrying shares, as last read
	members    map[string]*deadMember // by window id: replica incarnations that died carrying shares
	rivals     map[string]rival       // by replica/incarnation: live holders of this one's identity (tick's alone)

	reportMu sync.Mutex // one report at a time, so OnChange sees the changes in order
	reported Status
	heldBack prometheus.Gauge // heartbeatd_hold_back: reported.Active
	changed  chan struct{}
}

// Window ids this package opens itself; probes get "ingest/<name>".
const (
	windowDown  = "down"
	windowRedis = "redis"
	windowStall = "stall"
)

// claimNothing is the watermark that lets no deadline through (every score is a later Unix time).
var claimNothing = time.UnixMilli(0)

// New returns a tracker; call Start before the scanners begin, then Run.
func New(opts Options) *Tracker {
	opts.Interval = defaults.Positive(opts.Interval, 250*time.Millisecond)
	opts.DownAfter = defaults.Positive(opts.DownAfter, 2*time.Second)
	opts.MaxHoldBack = defaults.Positive(opts.MaxHoldBack, config.DefaultMaxHoldBack)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Grace == nil {
		opts.Grace = func() time.Duration { return 0 }
	}
	opts.Logger = cmp.Or(opts.Logger, zap.NewNop())
	opts.MemberLapse = defaults.Positive(opts.MemberLapse, max(opts.Stall, 4*opts.Interval))
	h := &Tracker{opts: opts, keys: newKeyspace(opts.KeyPrefix), log: opts.Logger.With(zap.String("component", "holdback")), changed: make(chan struct{}, 1),
		members: map[string]*deadMember{},
		heldBack: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "hold_back",
			Help: "1 while detection is held back because heartbeatd itself could not hear the fleet."})}
	if opts.Stall > 0 {
		h.stall = &stallDetector{threshold: opts.Stall, record: h.stalled}
	}
	if r := opts.Registerer; r != nil {
		r.MustRegister(h.heldBack,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "hold_back_degraded",
				Help: "1 while a blind window outlived detection.max_hold_back and detection runs without trusting silence."},
				func() float64 { return b2f(h.degraded()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "hold_back_seconds",
				Help: "How long the oldest open or grace-period blind window has lasted; 0 when there is none."},
				func() float64 { return h.heldFor().Seconds() }))
	}
	return h
}

// Start refuses (ErrReplicaInUse) to run beside a live process of this replica's id or client ids;
// then it notices whether heartbeatd was down (the alive mark is stale) and, if so, records a window from
// the mark to now, and whether this replica's previous process died carrying shares; then it shares
// this replica's windows and reads everyone's, so the first claim already honours them.
func (h *Tracker) Start(ctx context.Context) error {
	if err := h.refuseDuplicate(ctx); err != nil {
		return err
	}
	now := h.opts.Now()
	pipe := h.opts.Client.Pipeline()
	alive := pipe.Get(ctx, h.keys.alive())
	own := pipe.HGet(ctx, h.keys.windows(), h.opts.ReplicaID)
	_, _ = pipe.Exec(ctx)
	mark, err := alive.Int64()
	if err != nil && err != redis.Nil {
		return fmt.Errorf("holdback: read the service-alive mark: %w", err)
	}
	if prev, ok := decodeEntry(h.opts.ReplicaID, own.Val()); ok && prev.incarnation != h.opts.Incarnation {
		// The previous process of this replica left its entry: it did not stop cleanly, and what it read
		// alone may be lost. The first tick overwrites the entry, so only this process can tell.
		h.mu.Lock()
		h.memberDiedLocked(now, h.opts.ReplicaID, prev, "restarted")
		h.mu.Unlock()
	}
	if last := time.UnixMilli(mark); err == nil && now.Sub(last) > h.opts.DownAfter {
		h.log.Warn("heartbeatd was down: holding detection back", zap.Time("since", last), zap.Duration("down_for", now.Sub(last)),
			zap.Duration("grace", h.opts.Grace()))
		h.record(Window{ID: windowDown, Cause: causeDown, From: last, To: now,
			Reason: fmt.Sprintf("heartbeatd was not running from %s to %s", last.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))})
	}
	if h.stall != nil {
		h.stall.reset(now)
	}
	return h.tick(ctx)
}

// Run reads the probes and shares the windows every Interval, and checks for stalls every
// config.StallTick, until ctx is done; Redis errors back off and keep the last known windows (scanners
// cannot claim without Redis anyway).
func (h *Tracker) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if h.stall != nil {
		wg.Go(func() {
			loop.Every(ctx, loop.Options{Interval: config.StallTick}, func(context.Context) error {
				h.stall.tick(h.opts.Now())
				return nil
			})
		})
	}
	// Not Immediate: Start ran the first tick.
	loop.Every(ctx, loop.Options{Interval: h.opts.Interval, MaxBackoff: 5 * time.Second,
		OnError: func(err error, _ int, _ time.Duration) { h.log.Debug("hold-back tick failed", zap.Error(err)) }},
		h.tick)
	wg.Wait()
	h.release()
	return nil
}

// release removes this replica's entries on a graceful stop; the alive mark stays, so a full stop of the
// service is still noticed at the next start.
func (h *Tracker) release() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	pipe := h.opts.Client.Pipeline()
	pipe.HDel(ctx, h.keys.windows(), h.opts.ReplicaID)
	pipe.HDel(ctx, h.keys.health(), h.opts.ReplicaID)
	_, _ = pipe.Exec(ctx)
}

// Watermark is the latest deadline that may be claimed at now of every device, whatever its timeout.
func (h *Tracker) Watermark(now time.Time) time.Time { return h.WatermarkFor(now)(math.MaxInt64) }

// WatermarkFor is what may be claimed at now, per device timeout (scan.ScannerOptions.Watermark):
// the package's watermark over every replica's windows for that timeout, no later than the last stall
// tick while a stall is being noticed nor than what the sources and the replicas carrying shares vouch
// for, and nothing while this replica's clock cannot be trusted.
func (h *Tracker) WatermarkFor(now time.Time) deadline.WatermarkFunc {
	floor, windows := h.floor(now)
	return func(timeout time.Duration) time.Time {
		return earliest(floor, watermark(now, windows, timeout, h.opts.MaxHoldBack))
	}
}

// HeardAfter is the end of the latest blind window that holds some devices back at now, zero when none
// does or only open ones do (scan.ScannerOptions.HeardAfter). A window holds a device back for its
// grace because a signal it sent inside may have been lost; a failure the device reported after the
// window ended is its word since, which no lost signal can have overtaken, so it needs no grace. A window
// still open holds such a failure anyway: its end is the watermark's business (WatermarkFor(0)).
func (h *Tracker) HeardAfter(now time.Time) time.Time {
	_, windows := h.floor(now)
	var end time.Time
	for _, w := range windows {
		if w.To.After(end) {
			end = w.To
		}
	}
	return end
}

// floor is the latest deadline that may be claimed at now of any device, whatever the windows say, and
// the windows that hold some devices at now.
func (h *Tracker) floor(now time.Time) (time.Time, []Window) {
	var stalledSince time.Time
	stalled := false
	if h.stall != nil {
		// Read before the windows: the detector records a stall's window before it moves on.
		stalledSince, stalled = h.stall.stalled(now)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.clockHoldsLocked(now) {
		return claimNothing, nil
	}
	h.writesRefusedLocked(now)
	m := h.opts.MaxHoldBack
	var windows []Window
	for w := range h.liveLocked(now) {
		if w.holds(now, m) {
			windows = append(windows, w)
		}
	}
	wm := now
	if stalled && now.Sub(stalledSince) < m {
		wm = earliest(wm, stalledSince)
	}
	if floor := h.memberFloorLocked(now); !floor.IsZero() {
		wm = earliest(wm, floor)
	}
	for _, p := range h.opts.Probes {
		if p.Floor == nil {
			continue
		}
		if floor := p.Floor(now); !floor.IsZero() && now.Sub(floor) < m {
			wm = earliest(wm, floor)
		}
	}
	return wm, windows
}

// Scans reports whether this replica may scan: false while its clock cannot be trusted (bounded by
// MaxHoldBack, like every hold). scan.OwnershipOptions.Eligible.
func (h *Tracker) Scans() bool { return !atNowLocked(h, h.clockHoldsLocked) }

// atNowLocked is read(now) under h.mu, with now taken before the lock.
func atNowLocked[T any](h *Tracker, read func(now time.Time) T) T {
	now := h.opts.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	return read(now)
}

func (h *Tracker) clockHoldsLocked(now time.Time) bool {
	return !h.clockBad.IsZero() && now.Before(h.clockBad.Add(h.opts.MaxHoldBack))
}

// Changed fires (coalesced) when hold-back starts or ends or detection turns degraded, so scanners
// re-claim at once.
func (h *Tracker) Changed() <-chan struct{} { return h.changed }

// Tick runs one round of Run at once: for callers that drive time themselves (tests on a fake clock).
func (h *Tracker) Tick(ctx context.Context) error { return h.tick(ctx) }

// tick folds the probes and the clock check into this replica's windows, shares them with the alive
// mark, and reads every other replica's.
func (h *Tracker) tick(ctx context.Context) error {
	now := h.opts.Now()
	h.mu.Lock()
	for _, p := range h.opts.Probes {
		id := "ingest/" + p.Name
		if t := p.Trouble(now); !t.Since.IsZero() {
			h.openLocked(now, id, CauseIngest, ScopeAll, t.Since, p.Name+": "+t.Why, t.Kept)
		} else {
			h.closeLocked(id, now)
		}
	}
	h.checkClockLocked(now)
	h.local = slices.DeleteFunc(h.local, func(w Window) bool { return !w.live(now) })
	local := slices.Clone(h.local)
	h.mu.Unlock()

	pipe := h.opts.Client.Pipeline()
	// This replica's last entry, for lostWritesLocked; HMGET answers a missing one without an error.
	before := pipe.HMGet(ctx, h.keys.windows(), h.opts.ReplicaID)
	pipe.HSet(ctx, h.keys.windows(), h.opts.ReplicaID, encodeEntry(now, h.opts.Incarnation, h.opts.ClientIDs, h.opts.Shares, local))
	pipe.HSet(ctx, h.keys.health(), h.opts.ReplicaID, legacyOutage(now, local, h.opts.MaxHoldBack))
	pipe.Set(ctx, h.keys.alive(), now.UnixMilli(), 0)
	shared := pipe.HGetAll(ctx, h.keys.windows())
	legacy := pipe.HGetAll(ctx, h.keys.health())
	if _, err := pipe.Exec(ctx); err != nil {
		h.redisDown(now)
		return fmt.Errorf("holdback: share the blind windows: %w", err)
	}
	h.warnDuplicates(now, shared.Val())
	remote, peers, stale := h.readRemote(now, shared.Val(), legacy.Val())
	if len(stale) > 0 {
		pipe := h.opts.Client.Pipeline()
		pipe.HDel(ctx, h.keys.windows(), stale...)
		pipe.HDel(ctx, h.keys.health(), stale...)
		_, _ = pipe.Exec(ctx)
	}
	// The round trip may have waited long on a frozen Redis: what is healthy now is healthy from now.
	after := h.opts.Now()
	h.mu.Lock()
	if after.Sub(now) > slowRoundTrip {
		// The other replicas' windows just read are as old as the wait: what they opened meanwhile (their
		// writes stuck behind the same Redis) reaches this replica at its next tick, within the grace.
		h.recordRedisLocked(after, now, after, redisUnreachable)
	}
	h.lostWritesLocked(after, before.Val())
	h.lastShared = now
	if !h.writesRefusedLocked(after) {
		h.closeLocked(windowRedis, after)
	}
	h.remote = remote
	h.followMembersLocked(now, peers)
	h.mu.Unlock()
	h.report(now)
	return nil
}

// readRemote turns the other replicas' entries into windows, and returns those that advertise shares. A
// replica silent for longer than a few intervals stopped without saying so: its windows end at its last
// word and keep their grace, and its entry goes once none is live (or at once when it cannot be read).
func (h *Tracker) readRemote(now time.Time, shared, legacy map[string]string) (remote []Window, peers map[string]entry, stale []string) {
	staleAfter := 20*h.opts.Interval + h.opts.DownAfter
	peers = map[string]entry{}
	for replica, v := range shared {
		if replica == h.opts.ReplicaID {
			continue
		}
		e, ok := decodeEntry(replica, v)
		if ok && len(e.shares) > 0 {
			peers[replica] = e
		}
		at, ws := e.at, e.windows
		if ok && now.Sub(at) > staleAfter {
			for i := range ws {
				if ws[i].To.IsZero() || ws[i].To.After(at) {
					ws[i].To = maxTime(at, ws[i].From)
				}
			}
			ok = slices.ContainsFunc(ws, func(w Window) bool { return w.live(now) })
		}
		if !ok {
			stale = append(stale, replica)
			continue
		}
		remote = append(remote, ws...)
	}
	for replica, v := range legacy {
		if _, current := shared[replica]; current || replica == h.opts.ReplicaID {
			continue
		}
		updated, o, ok := parseOutage(v)
		if !ok || now.Sub(updated) > staleAfter {
			stale = append(stale, replica)
			continue
		}
		if !o.start.IsZero() {
			remote = append(remote, Window{ID: "outage", Replica: replica, Cause: CauseIngest, Scope: ScopeAll, From: o.start,
				To: o.end, Opened: o.start, Grace: o.grace, Reason: o.reason})
		}
	}
	return remote, peers, stale
}

func (h *Tracker) checkClockLocked(now time.Time) {
	if h.opts.ClockCheck == nil {
		return
	}
	err := h.opts.ClockCheck()
	switch {
	case err == nil:
		h.clockBad = time.Time{}
	case h.clockBad.IsZero():
		h.clockBad = now
	}
	h.clockErr = err
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// earliestSet is earliest where a zero a means none yet.
func earliestSet(a, b time.Time) time.Time {
	if a.IsZero() {
		return b
	}
	return earliest(a, b)
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
