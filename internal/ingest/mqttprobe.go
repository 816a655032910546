package ingest

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/loop"
)

// A broker can stop delivering while the connection stays open: a frozen process, a host paused, a
// network that drops packets without a reset. paho notices only when a keep-alive goes unanswered (up
// to KeepAlive + its ping timeout, 40 s by default), and until then the fleet looks silent. So the
// source publishes a probe to a topic of its own every ProbeEvery, subscribed on the same connection:
// each probe that comes back vouches that everything the broker sent before it has arrived. So the
// source reads up to the last probe back (ReadUpTo: the hold-back claims no deadline past it + max_lag,
// as for a Kafka partition), and one not back within ProbeLate + ProbeEvery makes it blind
// (Health.Blind) from there. The probe counts only once one has come back, so a broker whose ACL drops
// it costs nothing but a warning.

// mqttProbe is the state of the source's probe.
type mqttProbe struct {
	topic string
	every time.Duration
	late  time.Duration
	now   func() time.Time // the shared clock: a probe's stamp and Health.Blind are on it

	echoed atomic.Int64 // the stamp of the last probe back (unix ns); 0 until one came back
	since  atomic.Int64 // when the current connection was made (unix ns): a probe may be late from there
}

// onEcho records a probe back; it reports whether m was one.
func (p *mqttProbe) onEcho(m mqtt.Message) bool {
	if p == nil || m.Topic() != p.topic {
		return false
	}
	m.Ack()
	// One writer: paho hands messages over on one goroutine (SetOrderMatters).
	if ns, err := strconv.ParseInt(string(m.Payload()), 10, 64); err == nil && ns > p.echoed.Load() {
		p.echoed.Store(ns)
	}
	return true
}

// connected restarts the wait for a probe on a new connection.
func (p *mqttProbe) connected() {
	if p != nil {
		p.since.Store(p.now().UnixNano())
	}
}

// readUpTo is the stamp of the last probe back (zero: none yet, or no probe).
func (p *mqttProbe) readUpTo() time.Time {
	if p == nil {
		return time.Time{}
	}
	if echoed := p.echoed.Load(); echoed != 0 {
		return time.Unix(0, echoed)
	}
	return time.Time{}
}

// blind is since when the broker has delivered nothing it vouches for (zero: it delivers). A probe
// sent within the last p.every may still be on its way; a new connection gets as long as a probe.
func (p *mqttProbe) blind(now time.Time) time.Time {
	upTo := p.readUpTo()
	if upTo.IsZero() {
		return time.Time{} // never came back: the broker's ACL may drop it (warned about)
	}
	if since := time.Unix(0, p.since.Load()); since.After(upTo) {
		upTo = since
	}
	if now.Sub(upTo) <= p.late+p.every {
		return time.Time{}
	}
	return upTo
}

// run publishes a probe every p.every while the client is connected, and warns once when none has come
// back after a while.
func (p *mqttProbe) run(ctx context.Context, client mqtt.Client, log *zap.Logger) {
	start := time.Now()
	warned := false
	loop.Every(ctx, loop.Options{Interval: p.every, Immediate: true}, func(context.Context) error {
		if !warned && p.echoed.Load() == 0 && time.Since(start) > 10*p.late {
			warned = true
			log.Warn("no MQTT probe has come back: allow heartbeatd to publish and subscribe to its probe topic, "+
				"or a broker that stops delivering with its connection open goes unnoticed", zap.String("topic", p.topic))
		}
		if client.IsConnectionOpen() {
			// QoS 1, as the signals: a broker forwards QoS 0 at once, past the QoS 1 messages its
			// in-flight window holds back, and such a probe would vouch for signals still queued there.
			// Nothing waits for the broker's answer.
			client.Publish(p.topic, 1, false, strconv.FormatInt(p.now().UnixNano(), 10))
		}
		return nil
	})
}
