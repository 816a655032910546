package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heartbeatd/heartbeatd/internal/invariant"
	"github.com/heartbeatd/heartbeatd/pkg/schedule"
)

// signaller is how devices signal: over MQTT (publisher) or Kafka (kafkaSignaller).
type signaller interface {
	// signal sends one signal per device (payload(id), nil = empty) and returns once the broker
	// acknowledged every one.
	signal(ids []string, payload func(id string) []byte) error
	// up is false while the broker is known to be unreachable.
	up() bool
}

// publisher is a device-side MQTT client. It reconnects quickly after a broker outage.
type publisher struct {
	c mqtt.Client
	// sent records the signals the broker acknowledged for the incident checker.
	sent *signalLog
}

func (f *fleet) publisher(name string) *publisher {
	f.t.Helper()
	return &publisher{sent: &f.signals, c: f.broker.Connect(f.t, mqtt.NewClientOptions().SetClientID(name).
		SetAutoReconnect(true).SetMaxReconnectInterval(250*time.Millisecond).
		SetConnectRetry(true).SetConnectRetryInterval(250*time.Millisecond))}
}

// window bounds QoS 1 publishes in flight: paho has 65535 packet ids.
const window = 10000

func (p *publisher) up() bool { return p.c.IsConnectionOpen() }

// signal publishes one QoS 1 signal per device and waits until the broker acknowledged every one.
func (p *publisher) signal(ids []string, payload func(id string) []byte) error {
	for start := 0; start < len(ids); start += window {
		end := min(start+window, len(ids))
		at := time.Now()
		toks := make([]mqtt.Token, 0, end-start)
		for _, id := range ids[start:end] {
			var b []byte
			if payload != nil {
				b = payload(id)
			}
			toks = append(toks, p.c.Publish("devices/"+id+"/heartbeat", 1, false, b))
		}
		for _, tok := range toks {
			if !tok.WaitTimeout(30 * time.Second) {
				return errors.New("chaos: publish not acknowledged within 30s")
			}
			if err := tok.Error(); err != nil {
				return fmt.Errorf("chaos: publish: %w", err)
			}
		}
		p.sent.record(ids[start:end], payload, at, time.Now())
	}
	return nil
}

// kafkaSignaller signals over Kafka ingest: one record per device on signalsTopic, keyed by its id.
type kafkaSignaller struct {
	c    *kgo.Client
	sent *signalLog
}

func (f *fleet) kafkaSignaller() *kafkaSignaller {
	f.t.Helper()
	return &kafkaSignaller{c: f.kafka.Client(f.t), sent: &f.signals}
}

func (k *kafkaSignaller) up() bool { return true }

func (k *kafkaSignaller) signal(ids []string, payload func(id string) []byte) error {
	recs := make([]*kgo.Record, len(ids))
	for i, id := range ids {
		recs[i] = &kgo.Record{Topic: signalsTopic, Key: []byte(id)}
		if payload != nil {
			recs[i].Value = payload(id)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	at := time.Now()
	if err := k.c.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("chaos: produce: %w", err)
	}
	k.sent.record(ids, payload, at, time.Now())
	return nil
}

// signalLog hands the signals a broker acknowledged to the incident checker, each with the timeout it
// gives its device: the type it names, else the shortest timeout configured (a device that kept an
// earlier, longer type is then judged less strictly, never falsely).
type signalLog struct {
	mu        sync.Mutex
	timeouts  map[string]time.Duration // type → timeout, from every daemon config of the scenario
	scheduled map[string]*schedule.Expected
	shortest  time.Duration
	checker   *invariant.Checker
}

// types records the types of a daemon's config: timed ones by their timeout, scheduled ones by their
// expected times.
func (l *signalLog) types(byName map[string]time.Duration, scheduled map[string]*schedule.Expected) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timeouts == nil {
		l.timeouts, l.scheduled = map[string]time.Duration{}, map[string]*schedule.Expected{}
	}
	maps.Copy(l.scheduled, scheduled)
	for name, d := range byName {
		l.timeouts[name] = d
		if l.shortest == 0 || d < l.shortest {
			l.shortest = d
		}
	}
}

// record hands the checker one acknowledged signal of each device of ids, begun at at and acknowledged
// by acked. Payloads that are not a plain signal (bad input, a reported failure) prove nothing and are
// left out.
func (l *signalLog) record(ids []string, payload func(id string) []byte, at, acked time.Time) {
	if l == nil || l.checker == nil {
		return
	}
	for _, id := range ids {
		var b []byte
		if payload != nil {
			b = payload(id)
		}
		if d, ok := l.timeoutOf(b, at); ok {
			l.checker.Signal(id, at, acked, d)
		}
	}
}

// timeoutOf is the timeout a signal with payload b, sent at at, gives its device, if b is a plain
// signal: for a scheduled type the time to the schedule's next occurrence + grace.
func (l *signalLog) timeoutOf(b []byte, at time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(b) == 0 {
		return l.shortest, l.shortest > 0
	}
	var v struct {
		Type   string `json:"type"`
		Status string `json:"status"`
	}
	if json.Unmarshal(b, &v) != nil || (v.Status != "" && v.Status != "ok") {
		return 0, false
	}
	if d, ok := l.timeouts[v.Type]; ok {
		return d, true
	}
	if e, ok := l.scheduled[v.Type]; ok {
		return e.Deadline(at).Sub(at), true
	}
	return l.shortest, l.shortest > 0
}

// paced signals ids once each, spread in 20 chunks over span, so their deadlines pass one chunk at a
// time over span (a fault injected meanwhile lands in the middle of a mass expiry). It returns at once;
// the returned channel yields the outcome.
func paced(p signaller, ids []string, span time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() {
		const chunks = 20
		tick := time.NewTicker(span / chunks)
		defer tick.Stop()
		size := (len(ids) + chunks - 1) / chunks
		for start := 0; start < len(ids); start += size {
			if start > 0 {
				<-tick.C
			}
			if err := p.signal(ids[start:min(start+size, len(ids))], nil); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	return done
}

// keep makes devices signal every timeout/5 through p (nil: an MQTT publisher of their own) until the
// scenario ends: the devices that must never be reported. While the broker is down a round fails and is
// retried at the next tick (that silence is the outage hold-back's job). It returns once the first
// round is in.
func (f *fleet) keep(p signaller, devices []string) {
	f.t.Helper()
	if p == nil {
		p = f.publisher("keeper-" + f.t.Name())
	}
	var rounds atomic.Int64
	f.t.Cleanup(repeatUntilStopped(timeout/5, func() {
		if p.up() && p.signal(devices, nil) == nil {
			rounds.Add(1)
		}
	}))
	// The first round is in before the scenario goes on, so every keeper is known to heartbeatd.
	require.True(f.t, poll(30*time.Second, func() bool { return rounds.Load() > 0 }), "keepers never signalled")
}
