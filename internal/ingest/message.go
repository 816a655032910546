package ingest

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/holdback"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// Source names, used as the `source` metric label and in dead letters (the dead letter's names, one
// place for both).
const (
	SourceMQTT  = event.SourceMQTT
	SourceKafka = event.SourceKafka
	// SourceHTTP is a signal posted to the HTTP API (docs/http-api.md#signals): no broker, the request
	// waits for the acknowledgement instead.
	SourceHTTP = event.SourceHTTP
)

// Message is one message a source received, with what the source already knows about it.
type Message struct {
	Source string // SourceMQTT, SourceKafka or SourceHTTP
	Topic  string
	Key    []byte // Kafka message key: the device id unless the payload names one
	// Device, Type and Parent are what the MQTT topic template named ("" when it names none).
	Device string
	// TopicDevice: the topic template has a {device_id} level, so Device is the device, even when that
	// level is empty (invalid_device_id: the payload's device_id never stands in for it).
	TopicDevice bool
	Type        string
	Parent      string
	// Presence is the kind of a presence subscription's message (config.PresenceOffline: the broker says
	// the device went offline; config.PresenceOnline: a signal); "" for a signal.
	Presence string
	Payload  []byte
	// ObjectOnly: the payload must be a JSON object (an element of an HTTP batch, which names its
	// device in it); anything else is malformed_json rather than an opaque heartbeat.
	ObjectOnly bool
	// Received is when the signal reached the transport: the signal time when the payload carries no
	// ts and the transport stamps none. Zero means now (the chain's clock).
	Received time.Time
	// Stamped is the time the transport recorded for the message (a Kafka record's timestamp): the
	// signal time when the payload carries no ts, so a consumer's delay never shifts a deadline
	// (docs/signals.md). Zero: none (MQTT).
	Stamped time.Time
	// Ack acknowledges the message at its broker. The chain calls it exactly once, after the message's
	// deadline write was acknowledged by Redis (or its dead letter was handled).
	Ack func()
}

// Refresher is what the chain writes deadlines to: *deadline.Store in production; tests wrap it to make
// Redis fail on demand.
type Refresher interface {
	Refresh(ctx context.Context, signals []deadline.Signal) error
}

// Marker moves deadlines earlier, with a cause (*deadline.Store): the write of reported failures and
// offline messages, which ordinary signals never make.
type Marker interface {
	MarkEarlier(ctx context.Context, marks []deadline.Mark) ([]deadline.MarkResult, error)
}

// Health is a source's view of its broker, read by readiness and by the detection hold-back.
type Health struct {
	Connected bool          // the session to the broker is up (and its subscriptions granted)
	Lag       time.Duration // how far behind the applied signals are; 0 when caught up
	Since     time.Time     // when the current Connected state began
	// Blind, when set, is since when the source cannot vouch for the signals although connected and
	// not lagging (a Kafka rebalance not yet read past), on the source's clock; BlindWhy says why.
	Blind    time.Time
	BlindWhy string
	// Kept: the broker keeps what the source has not read yet (Kafka), so a lag or a Blind span loses
	// nothing: once read past, every signal sent meanwhile is in.
	Kept bool
	// OwnLag is Lag over this replica's own share of the signals: for Kafka its assigned partitions,
	// counted from when it was given them (or, between assignments, how long it has had none beyond the group's rebalance timeout; before
	// its first, how long it has waited for it). A shared source's Lag and Blind also count
	// the other members' shares (BlindShared), which the hold-back waits for and readiness does not:
	// a replica is ready once it reads its own share in time.
	OwnLag      time.Duration
	BlindShared bool
}

// Sharing is a source that may read shares of the signals: Shares lists them (none when it reads all
// it subscribes to; their TakenOver is left to the caller, which sets the source's own); TakenOver
// reports whether a dead member's share was handed to the living and read past since
// (holdback.Share.TakenOver): it must not block.
type Sharing interface {
	Shares() []holdback.Share
	TakenOver(member string, since time.Time) bool
}

// Source is one transport feeding the chain.
type Source interface {
	// Name is the source's metric label: SourceMQTT or SourceKafka.
	Name() string
	// Run receives messages and submits them to chain until ctx ends, then waits (bounded) for the
	// messages it submitted to be acknowledged and closes its connection. The chain must keep running
	// until Run returned: stop sources before the chain they feed. Run returns an error only for a
	// configuration problem that retrying cannot fix (bad credentials, an untrusted certificate).
	Run(ctx context.Context, chain *Chain) error
	// Health reports the current state; safe for concurrent use.
	Health() Health
}

// healthState is the connection state of a source and how many of its messages wait for their write.
type healthState struct {
	mu        sync.Mutex
	connected bool
	since     time.Time

	// outstanding counts messages submitted and not yet acknowledged: a shutdown waits for them.
	outstanding atomic.Int64
}

func newHealthState() *healthState { return &healthState{since: time.Now()} }

// set records the connection state and reports whether it changed.
func (h *healthState) set(connected bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.connected == connected {
		return false
	}
	h.connected, h.since = connected, time.Now()
	return true
}

// begin counts n messages handed to the chain.
func (h *healthState) begin(n int) { h.outstanding.Add(int64(n)) }

// done counts one message acknowledged.
func (h *healthState) done() { h.outstanding.Add(-1) }

// dropped uncounts n messages the chain did not take: they are never acknowledged.
func (h *healthState) dropped(n int) { h.outstanding.Add(-int64(n)) }

func (h *healthState) health(lag time.Duration) Health {
	h.mu.Lock()
	defer h.mu.Unlock()
	return Health{Connected: h.connected, Lag: lag, Since: h.since}
}

// waitDrained waits until every submitted message was acknowledged or timeout passed.
func (h *healthState) waitDrained(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for h.outstanding.Load() > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond) // polling a counter: the chain acknowledges from many goroutines
	}
	return true
}
