package notify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// Retry bounds (docs/notifications.md): 1 s doubling to 5 min, with jitter (loop.Delay).
const (
	retryMin = time.Second
	RetryMax = 5 * time.Minute
	// retryBatch is how many due queues one pass of the retry loop takes; retryIdle its wait when none is due.
	retryBatch = 16
	retryIdle  = 250 * time.Millisecond
	// minSummaryEvery: a summary goes out at most once a second, however high the rate.
	minSummaryEvery = time.Second
)

// resultNoIncident is a repeat or act of an incident the receiver was never told of (its opening went
// elsewhere, or was held for an outage): not sent on its own.
const resultNoIncident = "no_incident"

// outlet is one receiver with what delivery needs around it: its rate limit, and whether it is known to
// be down, so a dead receiver costs one attempt per backoff step and not one per event.
type outlet struct {
	n       *Notifier
	name    string
	recv    Receiver
	limiter *rate.Limiter
	every   time.Duration // between summaries
	timeout time.Duration

	mu        sync.Mutex
	failures  int
	downUntil time.Time
}

func newOutlet(n *Notifier, recv Receiver, every time.Duration, burst int, timeout time.Duration) *outlet {
	return &outlet{n: n, name: recv.Name(), recv: recv, limiter: rate.NewLimiter(rate.Every(every), burst),
		every: max(every, minSummaryEvery), timeout: timeout}
}

// down records a failed attempt, logging the first and every tenth in a row; up a delivery.
func (o *outlet) down(now time.Time, err error) time.Time {
	o.mu.Lock()
	o.downUntil = now.Add(loop.Delay(o.failures, retryMin, RetryMax))
	o.failures++
	failures, until := o.failures, o.downUntil
	o.mu.Unlock()
	if failures == 1 || failures%10 == 0 {
		o.n.log.Warn("notification failed; kept for a retry", zap.String("receiver", o.name), zap.Int("failures_in_a_row", failures),
			zap.Time("next_try", until), zap.Error(err))
	}
	return until
}

func (o *outlet) up() {
	o.mu.Lock()
	o.failures, o.downUntil = 0, time.Time{}
	o.mu.Unlock()
}

// downTill is when the receiver is worth trying again, zero when it is not known to be down.
func (o *outlet) downTill(now time.Time) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	if now.Before(o.downUntil) {
		return o.downUntil
	}
	return time.Time{}
}

// send delivers d within the receiver's timeout.
func (o *outlet) send(ctx context.Context, d *Data) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	return o.recv.Send(ctx, d)
}

// offer is one event for this receiver: once per incident on its opening and its closing, behind the
// device's queued notifications, folded beyond the rate limit, kept for a retry when it fails. It
// returns an error only when what must be kept could not be (Redis): the event is then handled again.
func (o *outlet) offer(ctx context.Context, e *event.Event, labels map[string]string) error {
	d := &Data{Event: *e, Labels: labels, Receiver: o.name, Incident: e.ID}
	// One round trip for what the receiver was told of the device and whether its notifications wait.
	mark, queued, err := o.n.store.State(ctx, o.name, d.DeviceID)
	if err != nil {
		return err
	}
	record, result := o.incident(ctx, d, mark)
	if result != "" {
		o.n.metrics.count(o.name, result)
		return nil
	}
	if err := o.deliver(ctx, d, queued); err != nil {
		return err
	}
	if record != nil {
		return record()
	}
	return nil
}

// incident sets d.Incident from mark, what the receiver was told of the device's incident, and says
// whether the event is news to it (result "") or not; record, run once the event is delivered or kept,
// notes it.
func (o *outlet) incident(ctx context.Context, d *Data, mark string) (record func() error, result string) {
	st, dev := o.n.store, d.DeviceID
	id, _, _, marked := parseMark(mark)
	switch k := d.Kind; {
	case opens(k):
		incident, same, dup := opening(mark, &d.Event)
		if dup {
			return nil, resultDuplicate
		}
		d.Incident = incident
		return func() error {
			return st.Opened(ctx, o.name, dev, incident, incidentStart(&d.Event), string(k), same)
		}, ""
	case closes(k):
		if !marked {
			return nil, resultNoIncident
		}
		d.Incident = id
		return func() error { _, err := st.Closed(ctx, o.name, dev); return err }, ""
	case k == event.Alarm, k == event.Exhausted, k == event.Acked:
		if !marked {
			return nil, resultNoIncident
		}
		d.Incident = id
	}
	return nil, ""
}

// opening decides what an opening event is to a receiver that has mark for its device: a kind of the
// incident it was told of (same, that incident's id), nothing new (dup: that kind was sent), or a new
// incident (its own id). The same incident is the same start (incidentStart), or the escalation the
// incident machine allows without a close between (late or suppressed, then interrupted,
// docs/concepts.md#the-incident): a child's own timeout after its parent recovered starts anew.
func opening(mark string, e *event.Event) (incident string, same, dup bool) {
	id, seen, kinds, ok := parseMark(mark)
	if !ok {
		return e.ID, false, false
	}
	sent := slices.Contains(kinds, string(e.Kind))
	sameStart := seen == strconv.FormatInt(incidentStart(e).UnixMilli(), 10)
	switch {
	case sameStart && sent:
		return id, true, true
	case sameStart, e.Kind == event.Interrupted && !sent:
		return id, true, false
	}
	return e.ID, false, false
}

// incidentStart tells one incident of a device from the next: every event of an incident carries the last
// signal before it; an outage, which has none, its start.
func incidentStart(e *event.Event) time.Time {
	if e.LastSeen.IsZero() {
		return e.Deadline
	}
	return e.LastSeen
}

// parseMark reads an open HASH value "<id>|<last seen ms>|<kind>,<kind>".
func parseMark(v string) (id, seen string, kinds []string, ok bool) {
	j := strings.LastIndex(v, "|")
	if j < 0 {
		return "", "", nil, false
	}
	i := strings.LastIndex(v[:j], "|")
	if i < 0 {
		return "", "", nil, false
	}
	return v[:i], v[i+1 : j], strings.Split(v[j+1:], ","), true
}

// deliver sends d now, or keeps it: behind the device's queue, folded, or queued for a retry.
func (o *outlet) deliver(ctx context.Context, d *Data, queued bool) error {
	st, now := o.n.store, o.n.now()
	if queued {
		return o.keep(ctx, pending{Data: d, First: now.UnixMilli()}, now, resultQueued)
	}
	if until := o.downTill(now); !until.IsZero() {
		return o.keep(ctx, pending{Data: d, First: now.UnixMilli()}, until, resultQueued)
	}
	if !o.limiter.Allow() {
		if err := st.Fold(ctx, o.name, string(d.Kind), d.DeviceID, now); err != nil {
			return err
		}
		o.n.metrics.count(o.name, resultFolded)
		return nil
	}
	err := o.send(ctx, d)
	switch {
	case err == nil:
		o.up()
		o.n.metrics.count(o.name, resultSent)
		return nil
	case permanent(err):
		return o.dead(ctx, d, 1, "refused", err)
	}
	return o.keep(ctx, pending{Data: d, Attempts: 1, First: now.UnixMilli()}, o.down(now, err), resultFailed)
}

// keep queues p for a retry at due; a full queue dead-letters it.
func (o *outlet) keep(ctx context.Context, p pending, due time.Time, result string) error {
	err := o.n.store.Enqueue(ctx, o.name, p, due)
	if errors.Is(err, errQueueFull) {
		return o.dead(ctx, p.Data, p.Attempts, "queue full", fmt.Errorf("%d notifications already wait for %s", maxQueue, p.Data.DeviceID))
	}
	if err == nil {
		o.n.metrics.count(o.name, result)
	}
	return err
}

// dead keeps a dead letter with the receiver's answer.
func (o *outlet) dead(ctx context.Context, d *Data, attempts int, reason string, cause error) error {
	dl := DeadLetter{Receiver: o.name, EventID: d.ID, DeviceID: d.DeviceID, Kind: string(d.Kind), Reason: reason,
		Attempts: attempts, At: o.n.now().UTC(), Answer: clip(cause.Error(), maxAnswer)}
	if d.Summary != nil {
		dl.Folded = d.Summary.Count
	}
	var de *DeliveryError
	if errors.As(cause, &de) {
		dl.Status, dl.Answer = de.Status, de.Answer
	}
	if err := o.n.store.Dead(ctx, dl); err != nil {
		return err
	}
	o.n.log.Error("notification dead-lettered", zap.String("receiver", o.name), zap.String("event", d.ID),
		zap.String("reason", reason), zap.Int("status", dl.Status), zap.String("answer", dl.Answer))
	o.n.metrics.count(o.name, resultDead)
	return nil
}

// retries delivers the queued notifications as they come due, until ctx ends.
func (o *outlet) retries(ctx context.Context) {
	var backoff loop.Backoff
	backoff.Min, backoff.Max = 200*time.Millisecond, 10*time.Second
	for ctx.Err() == nil {
		n, err := o.retryPass(ctx)
		if waiting, werr := o.n.store.Waiting(ctx, o.name); werr == nil {
			o.n.metrics.pending.WithLabelValues(o.name).Set(float64(waiting))
		}
		if err != nil && ctx.Err() == nil {
			o.n.log.Warn("notify retries: Redis failed; retrying", zap.String("receiver", o.name), zap.Error(err))
			loop.Sleep(ctx, backoff.Next())
			continue
		}
		backoff.Reset()
		if n == 0 {
			loop.Sleep(ctx, retryIdle)
		}
	}
}

// retryPass tries the queues that are due once. After a failure the rest of the pass waits for the
// receiver's next try, so a receiver that hangs costs one timeout per step, not one per device.
func (o *outlet) retryPass(ctx context.Context) (int, error) {
	st := o.n.store
	// As many as the rate limit lets go now (at least one), each leased for its turn at the limit and
	// its attempt: a claim must not outlive its lease while it waits, or another process sends it too.
	n := max(1, min(retryBatch, int(o.limiter.Tokens())))
	due, err := st.Claim(ctx, o.name, o.n.now(), time.Duration(n)*(o.timeout+o.every)+5*time.Second, n)
	if err != nil {
		return 0, err
	}
	for i, c := range due {
		if until := o.downTill(o.n.now()); !until.IsZero() {
			for _, rest := range due[i:] {
				if err := st.Retry(ctx, o.name, rest, until); err != nil {
					return i, err
				}
			}
			return i, nil
		}
		if err := o.limiter.Wait(ctx); err != nil {
			return i, nil // ctx ended: the lease runs out and the head is tried again
		}
		if err := o.retryOne(ctx, c); err != nil {
			return i, err
		}
	}
	return len(due), nil
}

func (o *outlet) retryOne(ctx context.Context, c claimed) error {
	st, now := o.n.store, o.n.now()
	err := o.send(ctx, c.p.Data)
	c.p.Attempts++
	switch {
	case err == nil:
		o.up()
		o.n.metrics.count(o.name, resultSent)
		return st.Settle(ctx, o.name, c.device, c.raw, now)
	case permanent(err):
		if err := o.dead(ctx, c.p.Data, c.p.Attempts, "refused", err); err != nil {
			return err
		}
		return st.Settle(ctx, o.name, c.device, c.raw, now)
	case now.Sub(time.UnixMilli(c.p.First)) >= o.n.opts.Notify.GiveUp():
		if err := o.dead(ctx, c.p.Data, c.p.Attempts, "gave up after notify.give_up_after", err); err != nil {
			return err
		}
		return st.Settle(ctx, o.name, c.device, c.raw, now)
	}
	o.n.metrics.count(o.name, resultFailed)
	next := o.down(now, err)
	if own := now.Add(loop.Delay(c.p.Attempts-1, retryMin, RetryMax)); own.After(next) {
		next = own
	}
	return st.Retry(ctx, o.name, c, next)
}

// summaries sends what the rate limit folded, one message per interval, until ctx ends.
func (o *outlet) summaries(ctx context.Context) {
	for loop.Sleep(ctx, o.every) {
		sum, err := o.n.store.Folded(ctx, o.name, o.timeout+o.every)
		if err != nil || sum == nil {
			if err != nil && ctx.Err() == nil {
				o.n.log.Warn("notify summary: Redis failed", zap.String("receiver", o.name), zap.Error(err))
			}
			continue
		}
		if o.limiter.Wait(ctx) != nil {
			return
		}
		d := &Data{Event: event.Event{Kind: KindSummary, At: o.n.now().UTC()}, Receiver: o.name, Summary: sum}
		err = o.send(ctx, d)
		switch {
		case err == nil:
			o.up()
			o.n.metrics.count(o.name, resultSent)
		case permanent(err):
			if derr := o.dead(ctx, d, 1, "refused", err); derr != nil {
				continue
			}
		default:
			o.down(o.n.now(), err)
			o.n.metrics.count(o.name, resultFailed)
			continue // the fold stays; sent again once its lease runs out
		}
		if err := o.n.store.SettleFold(ctx, o.name, sum); err != nil {
			o.n.log.Warn("notify summary: settling the fold failed; it may be sent again", zap.String("receiver", o.name), zap.Error(err))
		}
	}
}
