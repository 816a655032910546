package alarm

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/pkg/config"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
)

// Probe is one ingest source as the hold-back sees it.
type Probe struct {
	Name string
	// Trouble reports since when the source has not delivered signals in time (disconnected, or its
	// oldest pending message waited too long), on the shared clock; zero when it is healthy. why says
	// what is wrong.
	Trouble func(now time.Time) (since time.Time, why string)
	// Floor, when set, is the latest deadline the source vouches for at now (all it read up to, plus
	// the lag it is allowed); zero = no bound. Watermark never passes it, so a lag counts from where it
	// began even before Trouble reports it. At most MaxHoldBack old, like every hold.
	Floor func(now time.Time) time.Time
}

// HoldBackOptions configures a HoldBack.
type HoldBackOptions struct {
	Client    redis.UniversalClient
	Keys      deadline.Keyspace
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
	// Grace is how long a window keeps holding after it closed (detection.grace_after_outage, 0 = the
	// longest type timeout, resolved by the caller); read whenever a window opens or closes, so a reload
	// applies.
	Grace func() time.Duration
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
	// OnChange is told whenever hold-back starts or ends (metric).
	OnChange func(active bool)
	// Registerer gets heartbeatd_hold_back_degraded and heartbeatd_hold_back_seconds; nil = none.
	Registerer prometheus.Registerer
}

// HoldBackStatus is the hold-back state shown by /readyz, /v1/stats and the log.
type HoldBackStatus struct {
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
	// Clock says why this replica claims nothing (its offset from Redis TIME); empty while it scans.
	Clock string `json:"clock,omitempty"`
}

// HoldBack keeps heartbeatd from reporting devices as silent when it is heartbeatd that could not hear
// them. Every reason for that is a blind window (window.go): a source of any replica down or lagging,
// heartbeatd down or stalled, Redis refusing writes. Each replica shares its windows in Redis and every
// scanner honours all of them (Watermark), because with shared subscriptions and consumer groups one
// replica's blindness hides signals of any slot. No window holds longer than MaxHoldBack.
//
// Sources that know of further windows (a Kafka partition being rebalanced, a dead member's share) call
// Open and Close, or Record for a span already over.
type HoldBack struct {
	opts  HoldBackOptions
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
	reported HoldBackStatus
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

// NewHoldBack returns a tracker; call Start before the scanners begin, then Run.
func NewHoldBack(opts HoldBackOptions) *HoldBack {
	if opts.Interval <= 0 {
		opts.Interval = 250 * time.Millisecond
	}
	if opts.DownAfter <= 0 {
		opts.DownAfter = 2 * time.Second
	}
	if opts.MaxHoldBack <= 0 {
		opts.MaxHoldBack = config.DefaultMaxHoldBack
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Grace == nil {
		opts.Grace = func() time.Duration { return 0 }
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.MemberLapse <= 0 {
		opts.MemberLapse = max(opts.Stall, 4*opts.Interval)
	}
	h := &HoldBack{opts: opts, log: opts.Logger.With(zap.String("component", "holdback")), changed: make(chan struct{}, 1),
		members: map[string]*deadMember{}}
	if opts.Stall > 0 {
		h.stall = &stallDetector{threshold: opts.Stall, record: h.stalled}
	}
	if r := opts.Registerer; r != nil {
		r.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "hold_back_degraded",
				Help: "1 while a blind window outlived detection.max_hold_back and detection runs without trusting silence."},
				func() float64 { return b2f(h.Degraded()) }),
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
func (h *HoldBack) Start(ctx context.Context) error {
	if err := h.refuseDuplicate(ctx); err != nil {
		return err
	}
	now := h.opts.Now()
	pipe := h.opts.Client.Pipeline()
	alive := pipe.Get(ctx, h.opts.Keys.Alive())
	own := pipe.HGet(ctx, h.opts.Keys.Windows(), h.opts.ReplicaID)
	_, _ = pipe.Exec(ctx)
	mark, err := alive.Int64()
	if err != nil && err != redis.Nil {
		return fmt.Errorf("alarm: read the service-alive mark: %w", err)
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
		h.Record(Window{ID: windowDown, Cause: CauseDown, From: last, To: now,
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
func (h *HoldBack) Run(ctx context.Context) error {
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
func (h *HoldBack) release() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	pipe := h.opts.Client.Pipeline()
	pipe.HDel(ctx, h.opts.Keys.Windows(), h.opts.ReplicaID)
	pipe.HDel(ctx, h.opts.Keys.Health(), h.opts.ReplicaID)
	_, _ = pipe.Exec(ctx)
}

// Open records that this replica cannot trust silence since from, until Close(id). Opening an id that
// is open or still in its grace keeps its start and when it was opened, so a flapping cause cannot hold
// detection past MaxHoldBack.
func (h *HoldBack) Open(id string, cause Cause, scope Scope, from time.Time, reason string) {
	now := h.opts.Now()
	h.mu.Lock()
	h.openLocked(now, id, cause, scope, from, reason)
	h.mu.Unlock()
	h.report(now)
}

// Close ends window id at to; it keeps holding for the grace after to. An id that is not open is
// ignored.
func (h *HoldBack) Close(id string, to time.Time) {
	now := h.opts.Now()
	h.mu.Lock()
	h.closeLocked(id, to)
	h.mu.Unlock()
	h.report(now)
}

// Record adds a window that is already over (w.To set): a stall, or the time heartbeatd was down. It
// merges with a live window of the same id.
func (h *HoldBack) Record(w Window) {
	now := h.opts.Now()
	h.mu.Lock()
	h.recordLocked(now, w)
	h.mu.Unlock()
	h.report(now)
}

func (h *HoldBack) find(id string) int {
	return slices.IndexFunc(h.local, func(w Window) bool { return w.ID == id })
}

// put stores w as this replica's window id, replacing a dead one of that id.
func (h *HoldBack) put(w Window) {
	if i := h.find(w.ID); i >= 0 {
		h.local[i] = w
		return
	}
	h.local = append(h.local, w)
}

func (h *HoldBack) openLocked(now time.Time, id string, cause Cause, scope Scope, from time.Time, reason string) {
	from = earliest(from, now)
	if scope == "" {
		scope = ScopeAll
	}
	if i := h.find(id); i >= 0 && h.local[i].Live(now) {
		w := &h.local[i]
		if !w.To.IsZero() {
			h.log.Warn("blind window reopened within its grace", zap.String("window", id), zap.String("reason", reason))
		}
		w.From, w.To, w.Cause, w.Scope, w.Reason = earliest(w.From, from), time.Time{}, cause, scope, reason
		return
	}
	h.put(Window{ID: id, Replica: h.opts.ReplicaID, Cause: cause, Scope: scope, From: from, Opened: now, Grace: h.opts.Grace(), Reason: reason})
	h.log.Warn("blind window opened", zap.String("window", id), zap.String("cause", string(cause)), zap.Time("from", from),
		zap.String("reason", reason))
}

func (h *HoldBack) closeLocked(id string, to time.Time) {
	i := h.find(id)
	if i < 0 || !h.local[i].To.IsZero() {
		return
	}
	w := &h.local[i]
	w.To, w.Grace = maxTime(to, w.From), h.opts.Grace()
	h.log.Info("blind window closed; grace before claiming what fell inside it", zap.String("window", id),
		zap.Duration("lasted", w.To.Sub(w.From)), zap.Duration("grace", w.Grace), zap.Time("until", w.Until()))
}

func (h *HoldBack) recordLocked(now time.Time, w Window) {
	w.Replica, w.Grace = h.opts.ReplicaID, h.opts.Grace()
	if w.Scope == "" {
		w.Scope = ScopeAll
	}
	if i := h.find(w.ID); i >= 0 && h.local[i].Live(now) {
		prev := h.local[i]
		w.From, w.Opened = earliest(prev.From, w.From), prev.Opened
		if prev.To.IsZero() {
			w.To = time.Time{} // still open
		} else {
			w.To = maxTime(prev.To, w.To)
		}
	} else {
		w.Opened = now
	}
	h.put(w)
}

// stalled records a stall the detector found.
func (h *HoldBack) stalled(from, to time.Time, gap time.Duration) {
	h.log.Warn("heartbeatd stalled: holding detection back over what it could not hear", zap.Time("from", from),
		zap.Duration("gap", gap), zap.Duration("detection.stall", h.opts.Stall))
	h.Record(Window{ID: windowStall, Cause: CauseStall, From: from, To: to,
		Reason: "heartbeatd stalled for " + gap.Round(time.Millisecond).String()})
}

// Watermark is the latest deadline that may be claimed at now (deadline.ScannerOptions.Watermark): the
// package's Watermark over every replica's windows, no later than the last stall tick while a stall is
// being noticed, and nothing while this replica's clock cannot be trusted.
func (h *HoldBack) Watermark(now time.Time) time.Time {
	var stalledSince time.Time
	stalled := false
	if h.stall != nil {
		// Read before the windows: the detector records a stall's window before it moves on.
		stalledSince, stalled = h.stall.stalled(now)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.clockHoldsLocked(now) {
		return claimNothing
	}
	h.writesRefusedLocked(now)
	m := h.opts.MaxHoldBack
	wm := earliest(Watermark(now, h.local, m), Watermark(now, h.remote, m))
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
	return wm
}

// Scans reports whether this replica may scan: false while its clock cannot be trusted (bounded by
// MaxHoldBack, like every hold). deadline.OwnershipOptions.Eligible.
func (h *HoldBack) Scans() bool { return !atNowLocked(h, h.clockHoldsLocked) }

// atNowLocked is read(now) under h.mu, with now taken before the lock.
func atNowLocked[T any](h *HoldBack, read func(now time.Time) T) T {
	now := h.opts.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	return read(now)
}

func (h *HoldBack) clockHoldsLocked(now time.Time) bool {
	return !h.clockBad.IsZero() && now.Before(h.clockBad.Add(h.opts.MaxHoldBack))
}

// Degraded reports whether detection runs although it cannot trust silence: a live window is past
// MaxHoldBack, or this replica's clock has been off that long. DegradedSink marks the events then.
func (h *HoldBack) Degraded() bool { return atNowLocked(h, h.degradedLocked) }

func (h *HoldBack) degradedLocked(now time.Time) bool {
	for w := range h.liveLocked(now) {
		if w.Expired(now, h.opts.MaxHoldBack) {
			return true
		}
	}
	return !h.clockBad.IsZero() && !h.clockHoldsLocked(now)
}

// liveLocked yields every replica's windows that are open or in their grace at now.
func (h *HoldBack) liveLocked(now time.Time) iter.Seq[Window] {
	return func(yield func(Window) bool) {
		for _, ws := range [][]Window{h.local, h.remote} {
			for _, w := range ws {
				if w.Live(now) && !yield(w) {
					return
				}
			}
		}
	}
}

// heldFor is how long the oldest live window has lasted (heartbeatd_hold_back_seconds).
func (h *HoldBack) heldFor() time.Duration {
	return atNowLocked(h, func(now time.Time) time.Duration {
		var d time.Duration
		for w := range h.liveLocked(now) {
			d = max(d, now.Sub(w.Opened))
		}
		return d
	})
}

// Status is the current hold-back state.
func (h *HoldBack) Status() HoldBackStatus { return atNowLocked(h, h.statusLocked) }

func (h *HoldBack) statusLocked(now time.Time) HoldBackStatus {
	var st HoldBackStatus
	open := false
	for w := range h.liveLocked(now) {
		st.Windows = append(st.Windows, w)
		if !w.Holds(now, h.opts.MaxHoldBack) {
			st.Degraded = true
			continue
		}
		if !st.Active || w.From.Before(st.Since) {
			st.Since, st.Reason = w.From, w.Reason
			if w.Replica != h.opts.ReplicaID {
				st.Reason += " (replica " + w.Replica + ")"
			}
		}
		open = open || w.To.IsZero()
		st.Until = maxTime(st.Until, w.Until())
		st.Active = true
	}
	if open {
		st.Until = time.Time{}
	}
	slices.SortFunc(st.Windows, func(a, b Window) int { return a.From.Compare(b.From) })
	if h.clockErr != nil {
		if h.clockHoldsLocked(now) {
			st.Clock = h.clockErr.Error()
		} else {
			st.Degraded = true
			st.Clock = h.clockErr.Error() + fmt.Sprintf(" (scanning again after detection.max_hold_back %s)", h.opts.MaxHoldBack)
		}
	}
	return st
}

// Changed fires (coalesced) when hold-back starts or ends or detection turns degraded, so scanners
// re-claim at once.
func (h *HoldBack) Changed() <-chan struct{} { return h.changed }

// tick folds the probes and the clock check into this replica's windows, shares them with the alive
// mark, and reads every other replica's.
func (h *HoldBack) tick(ctx context.Context) error {
	now := h.opts.Now()
	h.mu.Lock()
	for _, p := range h.opts.Probes {
		id := "ingest/" + p.Name
		if since, why := p.Trouble(now); !since.IsZero() {
			h.openLocked(now, id, CauseIngest, ScopeAll, since, p.Name+": "+why)
		} else {
			h.closeLocked(id, now)
		}
	}
	h.checkClockLocked(now)
	h.local = slices.DeleteFunc(h.local, func(w Window) bool { return !w.Live(now) })
	local := slices.Clone(h.local)
	h.mu.Unlock()

	keys := h.opts.Keys
	pipe := h.opts.Client.Pipeline()
	pipe.HSet(ctx, keys.Windows(), h.opts.ReplicaID, encodeEntry(now, h.opts.Incarnation, h.opts.ClientIDs, h.opts.Shares, local))
	pipe.HSet(ctx, keys.Health(), h.opts.ReplicaID, legacyOutage(now, local, h.opts.MaxHoldBack))
	pipe.Set(ctx, keys.Alive(), now.UnixMilli(), 0)
	shared := pipe.HGetAll(ctx, keys.Windows())
	legacy := pipe.HGetAll(ctx, keys.Health())
	if _, err := pipe.Exec(ctx); err != nil {
		h.redisDown(now)
		return fmt.Errorf("alarm: share the blind windows: %w", err)
	}
	h.warnDuplicates(now, shared.Val())
	remote, peers, stale := h.readRemote(now, shared.Val(), legacy.Val())
	if len(stale) > 0 {
		pipe := h.opts.Client.Pipeline()
		pipe.HDel(ctx, keys.Windows(), stale...)
		pipe.HDel(ctx, keys.Health(), stale...)
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
func (h *HoldBack) readRemote(now time.Time, shared, legacy map[string]string) (remote []Window, peers map[string]entry, stale []string) {
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
			ok = slices.ContainsFunc(ws, func(w Window) bool { return w.Live(now) })
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

// redisDown opens (or keeps open) this replica's Redis window from the last time Redis took its windows:
// while Redis refuses writes the ingest chain stores no signal, so a deadline that passes meanwhile says
// nothing about the device. The hold applies at once, locally, because the scanners may reach Redis
// again before the next tick shares it; the next successful tick closes the window and starts its grace,
// in which the backlog the sources kept unacknowledged is stored.
func (h *HoldBack) redisDown(now time.Time) {
	h.mu.Lock()
	h.openRedisLocked(now, now, redisUnreachable)
	h.mu.Unlock()
	h.report(now)
}

// redisUnreachable is the reason of the window redisDown opens.
const redisUnreachable = "redis unreachable"

// slowRoundTrip is how long a tick's round trip may take before its wait counts as Redis unreachable:
// the ingest chain's default for a stuck write.
const slowRoundTrip = time.Second

// writesRefusedLocked keeps the Redis window open while WriteFailure reports refused deadline writes,
// from their start at the latest: the refused batch held signals received before its first attempt. A
// span of trouble that ended unseen (WriteTrouble) becomes the window it would have been. It reports
// whether writes are refused.
func (h *HoldBack) writesRefusedLocked(now time.Time) bool {
	var since time.Time
	if h.opts.WriteFailure != nil {
		since = h.opts.WriteFailure()
	}
	// Read after WriteFailure: a trouble ends (and is recorded) before the failure is cleared.
	if h.opts.WriteTrouble != nil {
		if from, to := h.opts.WriteTrouble(); to.After(h.troubleTo) {
			h.troubleTo = to
			if i := h.find(windowRedis); i < 0 || !h.local[i].Live(now) {
				h.log.Warn("deadline writes were refused or unanswered, unseen until now: holding detection back over that span",
					zap.Time("from", from), zap.Time("to", to))
			}
			h.recordRedisLocked(now, from, to, redisRefusedWrites)
		}
	}
	if since.IsZero() {
		return false
	}
	h.openRedisLocked(now, since, redisRefusedWrites)
	return true
}

// redisRefusedWrites is the reason of the window writesRefusedLocked opens.
const redisRefusedWrites = "redis refused deadline writes"

// openRedisLocked opens (or keeps open) this replica's Redis window from since or the last time Redis
// took its windows, whichever is earlier: nothing said after that share is known to be stored.
func (h *HoldBack) openRedisLocked(now, since time.Time, reason string) {
	h.openLocked(now, windowRedis, CauseRedis, ScopeAll, earliestSet(h.lastShared, since), reason)
}

// recordRedisLocked is openRedisLocked for a span already over at to.
func (h *HoldBack) recordRedisLocked(now, since, to time.Time, reason string) {
	h.recordLocked(now, Window{ID: windowRedis, Cause: CauseRedis, Scope: ScopeAll, From: earliestSet(h.lastShared, since),
		To: to, Reason: reason})
}

// checkClockLocked follows ClockCheck: since when it fails, and why.
func (h *HoldBack) checkClockLocked(now time.Time) {
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

// report logs and announces what changed since the last report: the hold starting, moving or ending,
// detection turning degraded or trusted again, this replica's clock.
func (h *HoldBack) report(now time.Time) {
	h.reportMu.Lock()
	defer h.reportMu.Unlock()
	h.mu.Lock()
	st := h.statusLocked(now)
	h.mu.Unlock()
	prev := h.reported
	h.reported = st
	wake := false
	if prev.Active != st.Active || !prev.Since.Equal(st.Since) {
		if st.Active {
			h.log.Warn("detection held back", zap.Time("since", st.Since), zap.Time("until", st.Until), zap.String("reason", st.Reason),
				zap.Int("windows", len(st.Windows)))
		} else if prev.Active {
			h.log.Info("hold-back ended: claiming every passed deadline again")
		}
		if h.opts.OnChange != nil && prev.Active != st.Active {
			h.opts.OnChange(st.Active)
		}
		wake = true
	}
	if prev.Degraded != st.Degraded {
		if st.Degraded {
			var why []string
			for _, w := range st.Windows {
				if !w.Holds(now, h.opts.MaxHoldBack) {
					why = append(why, w.Replica+"/"+w.ID+": "+w.Reason)
				}
			}
			if st.Clock != "" {
				why = append(why, st.Clock)
			}
			h.log.Error(`blind for longer than detection.max_hold_back: detection resumed, degraded (events carry "degraded": true)`,
				zap.Duration("max_hold_back", h.opts.MaxHoldBack), zap.Strings("windows", why))
		} else {
			h.log.Info("detection no longer degraded")
		}
		wake = true
	}
	if prev.Clock == "" && st.Clock != "" && !st.Degraded {
		h.log.Error("this replica claims nothing while its clock cannot be trusted", zap.String("clock", st.Clock))
		wake = true
	} else if prev.Clock != "" && st.Clock == "" {
		h.log.Info("clock trusted again: claiming")
		wake = true
	}
	if wake {
		select {
		case h.changed <- struct{}{}:
		default:
		}
	}
}

// legacyOutage is this replica's holding windows in the 0.1.0 form (updated:start:end:grace:reason, Unix
// ms), for replicas of that version during a rolling upgrade: the earliest start, and the latest end of
// the hold (zero while a window is open).
func legacyOutage(now time.Time, local []Window, maxHold time.Duration) string {
	var start, end time.Time
	open := false
	var reasons []string
	for _, w := range local {
		if !w.Holds(now, maxHold) {
			continue
		}
		start = earliestSet(start, w.From)
		open = open || w.To.IsZero()
		end = maxTime(end, w.Until())
		reasons = append(reasons, w.Reason)
	}
	if open {
		end = time.Time{}
	}
	return fmt.Sprintf("%d:%d:%d:0:%s", now.UnixMilli(), ms(start), ms(end), strings.Join(reasons, "; "))
}

// outage is a 0.1.0 replica's view: start zero = none; end zero = ongoing.
type outage struct {
	start, end time.Time
	grace      time.Duration
	reason     string
}

func parseOutage(v string) (updated time.Time, o outage, ok bool) {
	f := strings.SplitN(v, ":", 5)
	if len(f) != 5 {
		return time.Time{}, outage{}, false
	}
	var n [4]int64
	for i := range n {
		x, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return time.Time{}, outage{}, false
		}
		n[i] = x
	}
	return time.UnixMilli(n[0]), outage{start: fromMs(n[1]), end: fromMs(n[2]), grace: time.Duration(n[3]) * time.Millisecond, reason: f[4]}, true
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
