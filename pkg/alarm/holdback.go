package alarm

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
)

// Probe is one ingest source as the hold-back sees it.
type Probe struct {
	Name string
	// Trouble reports since when the source has not delivered signals in time (disconnected, or its
	// oldest pending message waited too long); zero when it is healthy. why says what is wrong.
	Trouble func(now time.Time) (since time.Time, why string)
}

// HoldBackOptions configures a HoldBack.
type HoldBackOptions struct {
	Client    redis.UniversalClient
	Keys      deadline.Keyspace
	ReplicaID string
	Probes    []Probe
	// Grace is how long to keep holding back after an outage ended (detection.grace_after_outage, 0 =
	// the longest type timeout, resolved by the caller); read at every tick, so a reload applies.
	Grace func() time.Duration
	// Interval is how often probes are read and this replica's view is shared (default 250ms).
	Interval time.Duration
	// DownAfter: a service-alive mark older than this at start-up means heartbeatd was not running
	// (default 2s; the mark is refreshed every Interval).
	DownAfter time.Duration
	Now       func() time.Time
	Logger    *zap.Logger
	// OnChange is told whenever hold-back starts or ends (metric).
	OnChange func(active bool)
}

// HoldBackStatus is the hold-back state shown by /readyz, /v1/stats and the log.
type HoldBackStatus struct {
	Active bool `json:"active"`
	// Since is the start of the outage: deadlines later than it are not claimed while Active.
	Since time.Time `json:"since,omitzero"`
	// Until is when the hold ends if nothing else goes wrong; zero while the outage lasts.
	Until  time.Time `json:"until,omitzero"`
	Reason string    `json:"reason,omitempty"`
}

// HoldBack keeps heartbeatd from reporting devices as silent when it is heartbeatd that could not hear
// them: while an ingest source (of any replica) is down or lagging, or after the whole service was down,
// only deadlines older than the outage's start are claimed; after it ends, what fell inside it waits
// Grace more, so backlogged and resumed signals land first. Devices still silent then are reported.
//
// Each replica shares its own outage in the Health hash; every replica holds back on the union, because
// with shared subscriptions and consumer groups one replica's lost source hides signals of any slot.
type HoldBack struct {
	opts HoldBackOptions
	log  *zap.Logger

	mu         sync.Mutex
	local      outage    // this replica's
	lastShared time.Time // when Redis last took this replica's view
	status     HoldBackStatus
	changed    chan struct{}
}

// outage is one replica's view: start zero = none; end zero = ongoing.
type outage struct {
	start, end time.Time
	grace      time.Duration
	reason     string
}

func (o outage) holding(now time.Time) bool {
	return !o.start.IsZero() && (o.end.IsZero() || now.Before(o.end.Add(o.grace)))
}

// NewHoldBack returns a tracker; call Start before the scanners begin, then Run.
func NewHoldBack(opts HoldBackOptions) *HoldBack {
	if opts.Interval <= 0 {
		opts.Interval = 250 * time.Millisecond
	}
	if opts.DownAfter <= 0 {
		opts.DownAfter = 2 * time.Second
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
	return &HoldBack{opts: opts, log: opts.Logger.With(zap.String("component", "holdback")), changed: make(chan struct{}, 1)}
}

// Start notices whether heartbeatd was down (the alive mark is stale) and, if so, opens an outage from
// the mark to now; then it shares this replica's view and reads everyone's, so the first claim already
// honours the hold.
func (h *HoldBack) Start(ctx context.Context) error {
	now := h.opts.Now()
	mark, err := h.opts.Client.Get(ctx, h.opts.Keys.Alive()).Int64()
	if err != nil && err != redis.Nil {
		return fmt.Errorf("alarm: read the service-alive mark: %w", err)
	}
	if err == nil {
		if last := time.UnixMilli(mark); now.Sub(last) > h.opts.DownAfter {
			h.mu.Lock()
			h.local = outage{start: last, end: now, grace: h.opts.Grace(),
				reason: fmt.Sprintf("heartbeatd was not running from %s to %s", last.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))}
			h.mu.Unlock()
			h.log.Warn("heartbeatd was down: holding detection back", zap.Time("since", last), zap.Duration("down_for", now.Sub(last)),
				zap.Duration("grace", h.opts.Grace()))
		}
	}
	return h.tick(ctx)
}

// Run probes and shares the outage state every Interval until ctx is done; Redis errors back off and keep
// the last known state (scanners cannot claim without Redis anyway).
func (h *HoldBack) Run(ctx context.Context) error {
	// Not Immediate: Start ran the first tick.
	loop.Every(ctx, loop.Options{Interval: h.opts.Interval, MaxBackoff: 5 * time.Second,
		OnError: func(err error, _ int, _ time.Duration) { h.log.Debug("hold-back tick failed", zap.Error(err)) }},
		h.tick)
	h.release()
	return nil
}

// release removes this replica's entry on a graceful stop; the alive mark stays, so a full stop of the
// service is still noticed at the next start.
func (h *HoldBack) release() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = h.opts.Client.HDel(ctx, h.opts.Keys.Health(), h.opts.ReplicaID).Err()
}

// Watermark is the latest deadline that may be claimed at now: now itself, or the outage start while
// holding back. It is what deadline.ScannerOptions.Watermark asks.
func (h *HoldBack) Watermark(now time.Time) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.status.Active && h.status.Since.Before(now) {
		if h.status.Until.IsZero() || now.Before(h.status.Until) {
			return h.status.Since
		}
	}
	return now
}

// Status is the current hold-back state.
func (h *HoldBack) Status() HoldBackStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.status
}

// Changed fires (coalesced) when hold-back starts or ends, so scanners re-claim at once.
func (h *HoldBack) Changed() <-chan struct{} { return h.changed }

// tick updates this replica's outage from its probes, shares it with the alive mark, and folds in every
// live replica's outage.
func (h *HoldBack) tick(ctx context.Context) error {
	now := h.opts.Now()
	grace := h.opts.Grace()
	h.mu.Lock()
	h.updateLocal(now, grace)
	local := h.local
	h.mu.Unlock()

	field := fmt.Sprintf("%d:%d:%d:%d:%s", now.UnixMilli(), ms(local.start), ms(local.end), local.grace.Milliseconds(), local.reason)
	pipe := h.opts.Client.Pipeline()
	pipe.HSet(ctx, h.opts.Keys.Health(), h.opts.ReplicaID, field)
	pipe.Set(ctx, h.opts.Keys.Alive(), now.UnixMilli(), 0)
	all := pipe.HGetAll(ctx, h.opts.Keys.Health())
	if _, err := pipe.Exec(ctx); err != nil {
		h.redisDown(now)
		return fmt.Errorf("alarm: share hold-back state: %w", err)
	}
	h.mu.Lock()
	h.lastShared = now
	if o := &h.local; o.reason == redisUnreachable && !o.start.IsZero() && o.end.IsZero() {
		o.end = now
		h.log.Info("Redis takes writes again; grace before claiming what fell inside the outage",
			zap.Duration("lasted", now.Sub(o.start)), zap.Duration("grace", o.grace))
	}
	h.mu.Unlock()
	var stale []string
	status := HoldBackStatus{}
	for replica, v := range all.Val() {
		updated, o, ok := parseOutage(v)
		if !ok || now.Sub(updated) > 20*h.opts.Interval+h.opts.DownAfter {
			stale = append(stale, replica) // a replica that stopped without saying so
			continue
		}
		if !o.holding(now) {
			continue
		}
		if !status.Active || o.start.Before(status.Since) {
			status.Since, status.Reason = o.start, o.reason
			if replica != h.opts.ReplicaID {
				status.Reason = o.reason + " (replica " + replica + ")"
			}
		}
		until := time.Time{}
		if !o.end.IsZero() {
			until = o.end.Add(o.grace)
		}
		if !status.Active || (!status.Until.IsZero() && (until.IsZero() || until.After(status.Until))) {
			status.Until = until
		}
		status.Active = true
	}
	if len(stale) > 0 {
		_ = h.opts.Client.HDel(ctx, h.opts.Keys.Health(), stale...).Err()
	}
	h.mu.Lock()
	prev := h.status
	h.status = status
	h.mu.Unlock()
	if prev.Active != status.Active || !prev.Since.Equal(status.Since) {
		if status.Active {
			h.log.Warn("detection held back", zap.Time("since", status.Since), zap.Time("until", status.Until), zap.String("reason", status.Reason))
		} else {
			h.log.Info("hold-back ended: claiming every passed deadline again")
		}
		if h.opts.OnChange != nil && prev.Active != status.Active {
			h.opts.OnChange(status.Active)
		}
		select {
		case h.changed <- struct{}{}:
		default:
		}
	}
	return nil
}

// redisUnreachable is the reason of an outage redisDown opened; the next successful tick ends it.
const redisUnreachable = "redis unreachable"

// redisDown opens (or keeps open) this replica's outage from the last time Redis took its view: while
// Redis refuses writes the ingest chain stores no signal, so a deadline that passes meanwhile says nothing
// about the device. The hold applies at once, locally, because the scanners may reach Redis again before
// the next tick shares it; the next successful tick ends the outage and starts its grace, in which the
// backlog the sources kept unacknowledged is stored.
func (h *HoldBack) redisDown(now time.Time) {
	h.mu.Lock()
	since := h.lastShared
	if since.IsZero() || since.After(now) {
		since = now
	}
	o := &h.local
	if !o.holding(now) || since.Before(o.start) {
		if !o.holding(now) {
			h.log.Warn("Redis refuses writes: holding detection back", zap.Time("since", since))
		}
		o.start = since
	}
	o.end, o.grace, o.reason = time.Time{}, h.opts.Grace(), redisUnreachable
	wasActive := h.status.Active
	if !h.status.Active || o.start.Before(h.status.Since) {
		h.status.Since, h.status.Reason = o.start, o.reason
	}
	h.status.Active, h.status.Until = true, time.Time{}
	h.mu.Unlock()
	if !wasActive {
		if h.opts.OnChange != nil {
			h.opts.OnChange(true)
		}
		select {
		case h.changed <- struct{}{}:
		default:
		}
	}
}

// updateLocal folds the probes into this replica's outage: trouble opens one (or reopens one still in
// its grace, keeping its start), health ends it, and an ended one is forgotten after its grace.
func (h *HoldBack) updateLocal(now time.Time, grace time.Duration) {
	var since time.Time
	var why []string
	for _, p := range h.opts.Probes {
		s, w := p.Trouble(now)
		if s.IsZero() {
			continue
		}
		why = append(why, p.Name+": "+w)
		if since.IsZero() || s.Before(since) {
			since = s
		}
	}
	o := &h.local
	switch {
	case !since.IsZero():
		if o.holding(now) {
			if since.Before(o.start) {
				o.start = since
			}
		} else {
			o.start = since
			h.log.Warn("ingest outage: holding detection back", zap.Time("since", since), zap.Strings("sources", why))
		}
		o.end, o.grace, o.reason = time.Time{}, grace, strings.Join(why, "; ")
	case !o.start.IsZero() && o.end.IsZero() && o.reason != redisUnreachable:
		o.end, o.grace = now, grace
		h.log.Info("ingest outage over; grace before claiming what fell inside it", zap.Duration("lasted", now.Sub(o.start)), zap.Duration("grace", grace))
	case !o.start.IsZero() && !o.holding(now):
		*o = outage{}
	}
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
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
	at := func(x int64) time.Time {
		if x == 0 {
			return time.Time{}
		}
		return time.UnixMilli(x)
	}
	return time.UnixMilli(n[0]), outage{start: at(n[1]), end: at(n[2]), grace: time.Duration(n[3]) * time.Millisecond, reason: f[4]}, true
}
