// Package alertmanager is heartbeatd's Alertmanager output (docs/events.md, outputs.alertmanager): it posts
// the open incidents to Alertmanager's v2 API as DeviceSilent alerts, so operators get Alertmanager's
// receivers, grouping and silences without writing a Kafka consumer.
//
// It follows Kafka and never leads it: an event.Observer whose Observe only queues (bounded; a full
// queue drops and counts). One loop (Run) turns the queued events into alerts and posts them to every
// configured Alertmanager (HA pairs get every alert). Firing alerts end AlertmanagerEndsAfter resends
// after each post, so every resend interval each replica re-posts the open incidents of the slots it
// owns (the re-sync): the replicas never post the same device twice per round, a slot handover moves the
// posting with the slot, and whatever was dropped or refused is repaired by the next round. An
// Alertmanager that fails is retried with jittered backoff; the resolves it missed are kept (bounded)
// and posted on its return, followed at once by a re-sync of the firing alerts.
//
// Alertmanager identifies an alert by its label set, so the labels of one incident never change from
// post to post: device, type and parent are read the same way on every path, and what explains a
// silence (inhibited_by: the parent of a suppressed device, the outage of an outage member) is taken
// from the event that fired it, remembered, and otherwise read from the incident in Redis (explainedBy).
package alertmanager

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/correlate"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/defaults"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/internal/silence"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// Defaults of Options.
const (
	defaultQueueSize     = 10_000
	defaultBatch         = 500
	defaultMaxPending    = 10_000
	defaultMaxRemembered = 100_000
)

// maxTypeResolve bounds the incidents one type silence resolves; alerts past it end by their endsAt.
const maxTypeResolve = 100_000

// shutdownFlush bounds the last posts of what is still queued when Run stops.
const shutdownFlush = 2 * time.Second

// Options configures an Output.
type Options struct {
	// URLs are Alertmanager base URLs; alerts go to <url>/api/v2/alerts of each.
	URLs        []string
	ResendEvery time.Duration     // default config.DefaultAlertmanagerResendEvery
	Labels      map[string]string // added to every alert
	Timeout     time.Duration     // one POST; default config.DefaultAlertmanagerTimeout
	TLS         *tls.Config       // nil: the system roots for https://
	Token       string            // sent as a bearer token when set

	// Store is where the re-sync lists the open incidents and reads parents; nil: no re-sync.
	Store *deadline.Store
	// Slots are the slots this replica owns (scan.Ownership.Slots): the re-sync posts only theirs.
	Slots func() []int
	// Silenced reports whether a silence covers the device now: its incident is not re-posted.
	Silenced func(device, typ string, now time.Time) bool
	// Silence resolves a silence id to its matcher, to tell a type silence's event from a device's.
	Silence func(id string) (deviceID, deviceType string, ok bool)
	// Outages lists the correlated outages open now (correlate.Correlator.Outages); the replica owning slot
	// 0 re-posts their DeviceOutage alerts with its re-sync. nil: outage alerts come from their events
	// only and end by endsAt.
	Outages func(ctx context.Context) ([]correlate.Outage, error)
	// OutageOf names, for each open incident the re-sync read from Redis, the correlated outage whose
	// member it is ("" for none): the open outage of one of its groups, begun before its interruption
	// was reported, as its interrupted event carried it. nil: only the outages this replica saw on the
	// events it posted are known.
	OutageOf func(ctx context.Context, incs []Incident) ([]string, error)

	QueueSize     int // events waiting to be posted; default defaultQueueSize
	Batch         int // alerts per POST; default defaultBatch
	MaxPending    int // resolves kept per Alertmanager while it is down; default defaultMaxPending
	MaxRemembered int // incidents whose inhibited_by/parent labels are remembered; default defaultMaxRemembered

	Client     *http.Client // nil: one built from TLS and Timeout
	Now        func() time.Time
	Logger     *zap.Logger
	Registerer prometheus.Registerer
}

// Output posts alerts to Alertmanager; Observe feeds it, Run posts.
type Output struct {
	opts    Options
	log     *zap.Logger
	queue   chan event.Event
	targets []*target

	// Owned by Run's goroutine.
	remembered map[string]memo  // device → the extras an incident was fired with
	recent     map[string]ended // device → an incident resolved lately

	posts   *prometheus.CounterVec
	dropped prometheus.Counter
	queued  prometheus.GaugeFunc
}

// memo is what an incident was fired with; seen is when a post last used it.
type memo struct {
	deadline int64
	x        extras
	seen     time.Time
}

// ended is an incident resolved at a time: the re-sync must not post it again from a read that came
// before its end reached Redis (the event is observed before the alarm loop settles it).
type ended struct {
	deadline int64
	at       time.Time
}

// New returns the output; Run starts posting.
func New(opts Options) (*Output, error) {
	if len(opts.URLs) == 0 {
		return nil, errors.New("alertmanager: no url")
	}
	opts.ResendEvery = defaults.Positive(opts.ResendEvery, config.DefaultAlertmanagerResendEvery)
	opts.Timeout = defaults.Positive(opts.Timeout, config.DefaultAlertmanagerTimeout)
	opts.QueueSize = defaults.Positive(opts.QueueSize, defaultQueueSize)
	opts.Batch = defaults.Positive(opts.Batch, defaultBatch)
	opts.MaxPending = defaults.Positive(opts.MaxPending, defaultMaxPending)
	opts.MaxRemembered = defaults.Positive(opts.MaxRemembered, defaultMaxRemembered)
	if opts.Slots == nil {
		opts.Slots = func() []int { return nil }
	}
	if opts.Silenced == nil {
		opts.Silenced = func(string, string, time.Time) bool { return false }
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Logger = cmp.Or(opts.Logger, zap.NewNop())
	if opts.Client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = opts.TLS
		opts.Client = &http.Client{Transport: tr, Timeout: opts.Timeout}
	}
	o := &Output{opts: opts, log: opts.Logger.With(zap.String("component", "alertmanager")),
		queue:      make(chan event.Event, opts.QueueSize),
		remembered: map[string]memo{}, recent: map[string]ended{},
		posts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "heartbeatd", Name: "alertmanager_posts_total",
			Help: "POSTs of alerts to Alertmanager by result: ok, failed (retried), rejected (4xx: not retried)."}, []string{"result"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "heartbeatd", Name: "alertmanager_dropped_total",
			Help: "Events not turned into alerts because the queue was full, and resolves not kept for an Alertmanager that was down; the re-sync and endsAt repair both."}),
	}
	for _, r := range []string{resultOK, resultFailed, resultRejected} {
		o.posts.WithLabelValues(r)
	}
	o.queued = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "heartbeatd", Name: "alertmanager_queue_length",
		Help: "Events waiting to be posted to Alertmanager."}, func() float64 { return float64(len(o.queue)) })
	for _, raw := range opts.URLs {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("alertmanager: url %q: %w", config.RedactURL(raw), withoutURL(err))
		}
		o.targets = append(o.targets, &target{base: config.RedactURL(raw), url: u.JoinPath("api", "v2", "alerts").String(),
			pending: map[string]alert{}, backoff: loop.Backoff{Min: 200 * time.Millisecond, Max: min(opts.ResendEvery, 30*time.Second)}})
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(o.posts, o.dropped, o.queued)
	}
	return o, nil
}

// endsAfter is how far ahead a firing alert ends.
func (o *Output) endsAfter() time.Duration { return config.AlertmanagerEndsAfter * o.opts.ResendEvery }

// Observe queues the events that make or end alerts and returns at once; a full queue drops them (the
// re-sync posts the firing alerts again, endsAt ends the unresolved ones).
func (o *Output) Observe(events []event.Event) {
	for _, e := range events {
		switch e.Kind {
		case event.Watchdog, event.Unsilenced, event.Flapping:
			continue // no alert starts or ends with them
		}
		select {
		case o.queue <- e:
		default:
			o.dropped.Inc()
		}
	}
}

// Run posts the queued events as they come and re-syncs every ResendEvery, until ctx is done; then it
// posts what is still queued within a short bound.
func (o *Output) Run(ctx context.Context) error {
	resync := time.NewTimer(0)
	defer resync.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	// Keep-alive connections would outlive the loop: their goroutines are gone when Run returns.
	defer o.opts.Client.CloseIdleConnections()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownFlush)
			o.handleQueued(fctx)
			cancel()
			return nil
		case e := <-o.queue:
			o.handle(ctx, o.drain(e))
		case <-resync.C:
			o.resync(ctx, o.up())
			resync.Reset(o.opts.ResendEvery)
		case <-retry.C:
			o.retryDown(ctx)
		}
		if at, ok := o.nextRetry(); ok {
			retry.Reset(max(time.Until(at), 0))
		}
	}
}

// drain is first and whatever else is queued, up to one batch.
func (o *Output) drain(first event.Event) []event.Event {
	batch := []event.Event{first}
	for len(batch) < o.opts.Batch {
		select {
		case e := <-o.queue:
			batch = append(batch, e)
		default:
			return batch
		}
	}
	return batch
}

// handleQueued posts everything queued now, a batch at a time.
func (o *Output) handleQueued(ctx context.Context) {
	for ctx.Err() == nil {
		select {
		case e := <-o.queue:
			o.handle(ctx, o.drain(e))
		default:
			return
		}
	}
}

// handle turns events into alerts and posts them.
func (o *Output) handle(ctx context.Context, events []event.Event) {
	now := o.opts.Now()
	var firing, resolving []incident
	var out []alert
	for _, e := range events {
		switch e.Kind {
		case event.Interrupted, event.Alarm, event.Exhausted, event.Suppressed, event.Late:
			firing = append(firing, fromEvent(e))
		case event.Recovered, event.Acked, event.Deleted:
			resolving = append(resolving, incident{device: e.DeviceID, typ: e.DeviceType, deadline: e.Deadline})
			if _, ok := o.recent[e.DeviceID]; ok || len(o.recent) < o.opts.MaxRemembered {
				o.recent[e.DeviceID] = ended{deadline: e.Deadline.UnixMilli(), at: now}
			}
		case event.Silenced:
			if typ, isType := o.typeSilence(e); isType {
				out = append(out, o.resolveType(ctx, typ, now)...)
				continue
			}
			resolving = append(resolving, incident{device: e.DeviceID, typ: e.DeviceType})
		case event.OutageStarted, event.OutageEnded:
			out = append(out, o.outageAlert(outageOf(e), e.Kind == event.OutageEnded, now))
		}
	}
	o.withParents(ctx, firing)
	for _, inc := range firing {
		delete(o.recent, inc.device)
		// A changed explanation (the parent is back and the device is still silent, an outage ended) is
		// another alert: the old one is resolved, not left to expire; so is a late device's warning once
		// it is interrupted (its deadline then is the interruption's).
		if m, ok := o.remembered[inc.device]; ok && m.x != inc.extras() && (m.deadline == inc.deadline.UnixMilli() || m.x.warning) {
			out = append(out, resolve(o.labels(inc.device, inc.typ, m.x), time.UnixMilli(m.deadline), now))
		}
		o.remember(inc, now)
		out = append(out, o.firing(inc, now))
	}
	out = append(out, o.resolutions(ctx, resolving, now)...)
	o.send(ctx, o.targets, out)
}

// typeSilence reports whether a silenced event is a type silence's, and its type.
func (o *Output) typeSilence(e event.Event) (string, bool) {
	if o.opts.Silence == nil {
		return "", false
	}
	id, ok := silence.IDOfEvent(e.ID)
	if !ok {
		return "", false
	}
	device, typ, ok := o.opts.Silence(id)
	return typ, ok && device == "" && typ != ""
}

// remember keeps the extras an incident is fired with, when it has any, so its later posts and its
// resolve carry the same labels.
func (o *Output) remember(inc incident, now time.Time) {
	x := inc.extras()
	if x == (extras{}) {
		delete(o.remembered, inc.device)
		return
	}
	if _, ok := o.remembered[inc.device]; ok || len(o.remembered) < o.opts.MaxRemembered {
		o.remembered[inc.device] = memo{deadline: inc.deadline.UnixMilli(), x: x, seen: now}
	}
}

// resolutions are the resolves of incidents that ended. Labels the incident was fired with here are
// used as remembered; otherwise every label set it may have been fired with under its parent is
// resolved (a resolve of an alert Alertmanager never had notifies no one).
func (o *Output) resolutions(ctx context.Context, incs []incident, now time.Time) []alert {
	var unknown []incident
	var out []alert
	for _, inc := range incs {
		if m, ok := o.remembered[inc.device]; ok {
			delete(o.remembered, inc.device)
			out = append(out, resolve(o.labels(inc.device, inc.typ, m.x), inc.deadline, now))
			continue
		}
		unknown = append(unknown, inc)
	}
	o.withParents(ctx, unknown)
	for _, inc := range unknown {
		out = append(out, resolve(o.labels(inc.device, inc.typ, extras{}), inc.deadline, now))
		if p := inc.parent; p != "" {
			out = append(out, resolve(o.labels(inc.device, inc.typ, extras{parent: p}), inc.deadline, now),
				resolve(o.labels(inc.device, inc.typ, extras{parent: p, inhibitedBy: p}), inc.deadline, now))
		}
	}
	return out
}

// withParents fills in the parent of the incidents that do not name one, in one round trip.
func (o *Output) withParents(ctx context.Context, incs []incident) {
	if o.opts.Store == nil || len(incs) == 0 {
		return
	}
	var ask []string
	var at []int
	for i, inc := range incs {
		if inc.parent == "" {
			ask, at = append(ask, inc.device), append(at, i)
		}
	}
	if len(ask) == 0 {
		return
	}
	parents, err := o.opts.Store.Links().ParentsOf(ctx, ask)
	if err != nil {
		// Without it the labels may differ from the re-sync's: logged, and the next round settles it.
		o.log.Warn("reading parents failed; alerts go out without their parent label", zap.Error(err))
		return
	}
	for j, i := range at {
		incs[i].parent = parents[j]
	}
}

// resolveType resolves the alerts of every open incident of a type (a type silence began), listed from
// Redis in pages: the replica that observes the silence resolves them whichever replica fired them.
func (o *Output) resolveType(ctx context.Context, typ string, now time.Time) []alert {
	if o.opts.Store == nil {
		return nil
	}
	var out []alert
	cursor, listed := "", 0
	for listed < maxTypeResolve {
		page, next, err := o.opts.Store.List(ctx, deadline.ListOptions{Interrupted: true, Type: typ, Limit: o.opts.Batch, Cursor: cursor})
		if err != nil {
			o.log.Warn("listing a silenced type's incidents failed; their alerts end by endsAt", zap.String("device_type", typ), zap.Error(err))
			break
		}
		incs := make([]incident, 0, len(page))
		for _, d := range page {
			incs = append(incs, incident{device: d.ID, typ: typ, deadline: d.Incident.DeadlineTime()})
		}
		listed += len(page)
		out = append(out, o.resolutions(ctx, incs, now)...)
		if len(out) >= o.opts.Batch {
			o.send(ctx, o.targets, out)
			out = nil
		}
		if next == "" {
			break
		}
		cursor = next
	}
	return out
}

// The results of a POST, as heartbeatd_alertmanager_posts_total counts them.
const (
	resultOK       = "ok"
	resultFailed   = "failed"
	resultRejected = "rejected"
)

// withoutURL is err without the URL a *url.Error quotes whole (its query, its user), for a message that
// names the URL redacted itself.
func withoutURL(err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return fmt.Errorf("%s: %w", uerr.Op, uerr.Err)
	}
	return err
}

// target is one Alertmanager.
type target struct {
	// base is its URL redacted (config.RedactURL), for logs and errors; url is where alerts are posted.
	base, url string
	down      bool
	retryAt   time.Time
	backoff   loop.Backoff
	// pending are the resolves it missed while down, by label set (the latest wins).
	pending map[string]alert
}

// up is the targets not known to be down.
func (o *Output) up() []*target {
	var out []*target
	for _, t := range o.targets {
		if !t.down {
			out = append(out, t)
		}
	}
	return out
}

// send posts alerts to every target in ts at once. A target down (or failing now) keeps the resolves
// for its return; its firing alerts come back with the re-sync that follows its return.
func (o *Output) send(ctx context.Context, ts []*target, alerts []alert) {
	if len(alerts) == 0 {
		return
	}
	now := o.opts.Now()
	var wg sync.WaitGroup
	for _, t := range ts {
		if t.down {
			o.keep(t, alerts, now)
			continue
		}
		wg.Go(func() {
			if err := o.postAll(ctx, t, alerts); err != nil {
				o.markDown(t, err)
				o.keep(t, alerts, now)
			}
		})
	}
	wg.Wait()
}

// keep adds the resolves among alerts to t's pending ones, within MaxPending.
func (o *Output) keep(t *target, alerts []alert, now time.Time) {
	for _, a := range alerts {
		if !a.resolved(now) {
			continue
		}
		k := a.key()
		if _, ok := t.pending[k]; !ok && len(t.pending) >= o.opts.MaxPending {
			o.dropped.Inc()
			continue
		}
		t.pending[k] = a
	}
}

// markDown schedules the next attempt at t after a jittered backoff.
func (o *Output) markDown(t *target, err error) {
	wait := t.backoff.Next()
	if !t.down {
		o.log.Warn("Alertmanager is not taking alerts; retrying, and keeping its resolves", zap.String("url", t.base),
			zap.Error(err), zap.Duration("retry_in", wait))
	}
	t.down, t.retryAt = true, time.Now().Add(wait)
}

// nextRetry is the earliest retry of a target that is down.
func (o *Output) nextRetry() (time.Time, bool) {
	var at time.Time
	for _, t := range o.targets {
		if t.down && (at.IsZero() || t.retryAt.Before(at)) {
			at = t.retryAt
		}
	}
	return at, !at.IsZero()
}

// retryDown tries every target whose retry is due with its pending resolves (an empty post when there
// are none); one that takes them is up again and gets the open incidents at once.
func (o *Output) retryDown(ctx context.Context) {
	for _, t := range o.targets {
		if !t.down || time.Now().Before(t.retryAt) {
			continue
		}
		pending := make([]alert, 0, len(t.pending))
		for _, a := range t.pending {
			pending = append(pending, a)
		}
		if err := o.postAll(ctx, t, pending); err != nil {
			o.markDown(t, err)
			continue
		}
		o.log.Info("Alertmanager takes alerts again; posting the open incidents", zap.String("url", t.base),
			zap.Int("resolves_kept", len(pending)))
		t.down, t.pending = false, map[string]alert{}
		t.backoff.Reset()
		o.resync(ctx, []*target{t})
	}
}

// postAll posts alerts to t in batches; an empty list is posted once (a probe).
func (o *Output) postAll(ctx context.Context, t *target, alerts []alert) error {
	for i := 0; i == 0 || i < len(alerts); i += o.opts.Batch {
		if err := o.post(ctx, t, alerts[i:min(i+o.opts.Batch, len(alerts))]); err != nil {
			return err
		}
	}
	return nil
}

// errRejected marks an answer that retrying the same alerts cannot change.
var errRejected = errors.New("alertmanager: alerts rejected")

// post sends one batch. A 4xx other than 429 rejects the batch (logged, counted, not retried: it
// would be rejected again); no answer, a 429 or a 5xx fails it.
func (o *Output) post(ctx context.Context, t *target, alerts []alert) error {
	body, err := json.Marshal(alerts)
	if err != nil {
		return fmt.Errorf("alertmanager: encode: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("alertmanager: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if o.opts.Token != "" {
		req.Header.Set("Authorization", "Bearer "+o.opts.Token)
	}
	resp, err := o.opts.Client.Do(req)
	if err != nil {
		o.posts.WithLabelValues(resultFailed).Inc()
		return fmt.Errorf("alertmanager: post to %s: %w", t.base, withoutURL(err))
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode/100 == 2:
		o.posts.WithLabelValues(resultOK).Inc()
		return nil
	case resp.StatusCode/100 == 4 && resp.StatusCode != http.StatusTooManyRequests:
		o.posts.WithLabelValues(resultRejected).Inc()
		o.log.Error("Alertmanager rejected alerts", zap.String("url", t.base), zap.Int("status", resp.StatusCode),
			zap.Int("alerts", len(alerts)), zap.String("answer", strings.TrimSpace(string(msg))), zap.Error(errRejected))
		return nil
	default:
		o.posts.WithLabelValues(resultFailed).Inc()
		return fmt.Errorf("alertmanager: post to %s: %s: %s", t.base, resp.Status, strings.TrimSpace(string(msg)))
	}
}
