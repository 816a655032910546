package alarm

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// defaultActTimeout bounds the publication of one act's event: the act is already stored, so a Kafka
// outage delays the operator's answer by at most this much.
const defaultActTimeout = 5 * time.Second

// ActsOptions configures Acts.
type ActsOptions struct {
	// Sink is the daemon's sink (hold-back's degraded mark, then the observed publisher), so the
	// outputs that follow Kafka see acts like any event. nil: acts publish nothing.
	Sink       event.Sink
	Metrics    *Metrics // events_total{kind} counts the acts Kafka took; nil = not counted
	Registerer prometheus.Registerer
	Timeout    time.Duration // default defaultActTimeout
	Logger     *zap.Logger
}

// Acts publishes the events of operator acts. An act is recorded in Redis before its event goes out,
// and it stands whether or not Kafka takes the event: a refused or timed-out event is logged and counted
// (heartbeatd_act_events_failed_total), never retried, never turned into an error for the operator.
type Acts struct {
	opts   ActsOptions
	log    *zap.Logger
	failed *prometheus.CounterVec
}

// NewActs returns the publisher of act events.
func NewActs(opts ActsOptions) *Acts {
	if opts.Timeout <= 0 {
		opts.Timeout = defaultActTimeout
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	a := &Acts{opts: opts, log: opts.Logger.With(zap.String("component", "acts")),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "heartbeatd", Name: "act_events_failed_total",
			Help: "Operator acts (ack, silence, unsilence, delete) recorded in Redis whose event Kafka did not take."}, []string{"kind"})}
	for _, k := range []event.Kind{event.Acked, event.Silenced, event.Unsilenced, event.Deleted} {
		a.failed.WithLabelValues(string(k))
		a.opts.Metrics.Events.WithLabelValues(string(k))
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(a.failed)
	}
	return a
}

// Publish sends e and reports whether Kafka took it. It runs on past ctx's cancellation (an operator
// closing the connection does not withdraw the act) for at most the timeout.
func (a *Acts) Publish(ctx context.Context, e event.Event) bool {
	if a == nil || a.opts.Sink == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.opts.Timeout)
	defer cancel()
	err := a.opts.Sink.Publish(ctx, []event.Event{e})[0]
	if err != nil {
		a.failed.WithLabelValues(string(e.Kind)).Inc()
		a.log.Error("the act is recorded, but its event was not published", zap.String("kind", string(e.Kind)),
			zap.String("id", e.ID), zap.String("device_id", e.DeviceID), zap.Error(err))
		return false
	}
	a.opts.Metrics.Events.WithLabelValues(string(e.Kind)).Inc()
	return true
}

// RecoveryHold is how long an incident's `recovered` may wait for the `acked` event of an ack being
// announced (deadline.Store.SetAcked): the longest Publish takes, and a second for the round trips
// around it. 0 when acts publish nothing.
func (a *Acts) RecoveryHold() time.Duration {
	if a == nil || a.opts.Sink == nil {
		return 0
	}
	return a.opts.Timeout + time.Second
}

// AckedEvent is the `acked` event of an incident of device (of type typ, whose policy's timeout and
// warn_after date it, EventTimes): its id is <device>/<its events' deadline ms>/acked/0, so an ack
// repeated for the same incident is the same event. lastSignal, when known (deadline.Device.LastSignal:
// the deadline was written under an earlier timeout), is the device's last signal the policy cannot tell.
func AckedEvent(device, typ string, incident deadline.State, pol config.Policy, lastSignal time.Time, act event.Act, now time.Time) event.Event {
	dl, lastSeen := EventTimes(incident, pol)
	if !lastSignal.IsZero() {
		lastSeen = lastSignal
	}
	e := event.New(event.Acked, device, typ, dl, lastSeen, now, 0)
	e.By, e.Note, e.Token = act.By, act.Note, act.Token
	return e
}

// DeletedEvent is the `deleted` event of device, whose deadline (its open incident's, else its current
// one) is dl: its id is <device>/<ms of the act>/deleted/0, since a device may be deleted, signal again
// and be deleted again under the same deadline.
func DeletedEvent(device, typ string, dl time.Time, timeout time.Duration, act event.Act, now time.Time) event.Event {
	var lastSeen time.Time
	if !dl.IsZero() {
		lastSeen = dl.Add(-timeout)
	}
	e := event.New(event.Deleted, device, typ, dl, lastSeen, now, 0)
	e.ID = event.ID(device, now, event.Deleted, 0)
	e.By, e.Note, e.Token = act.By, act.Note, act.Token
	return e
}
