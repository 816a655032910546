// Package event holds what heartbeatd publishes: the alarm events of docs/events.md and the dead letters of bad
// input. Consumers written in Go import this package to decode the events; it links no Kafka client (the
// publisher is internal/eventkafka). heartbeatd's alarm and ingest packages depend only on the Sink interfaces
// so their tests can use fakes.
package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Schema names the JSON layout of an Event. It changes only with an incompatible change of the layout;
// fields may be added within v1, so consumers should ignore fields they do not know.
const Schema = "heartbeatd.event/v1"

// Kind is what happened to a device.
type Kind string

const (
	// Interrupted is the first detection after a device's deadline passed (repeat 0).
	Interrupted Kind = "interrupted"
	// Late is the early warning of a type with warn_after: the device has been silent that long, and is
	// interrupted at its deadline unless it signals first. Sent once per incident; its deadline is the
	// warning's, last_seen + warn_after.
	Late Kind = "late"
	// Alarm is each re-alarm while the device is still silent (repeat 1, 2, …).
	Alarm Kind = "alarm"
	// Recovered is the first signal after an interruption; silent_for_ms is the outage length.
	Recovered Kind = "recovered"
	// Exhausted says max_repeats was reached: no more alarms until the device recovers.
	Exhausted Kind = "exhausted"
	// Suppressed replaces interrupted for a device whose parent is interrupted (docs/concepts.md); no repeats follow.
	Suppressed Kind = "suppressed"
	// OutageStarted and OutageEnded bracket a correlated outage (docs/concepts.md); keyed by the group.
	OutageStarted Kind = "outage_started"
	OutageEnded   Kind = "outage_ended"
	// Flapping says the device crossed flapping.count interruptions within flapping.window.
	Flapping Kind = "flapping"
	// Acked, Silenced, Unsilenced and Deleted are an operator's acts, so consumers see why repeats stopped.
	Acked      Kind = "acked"
	Silenced   Kind = "silenced"
	Unsilenced Kind = "unsilenced"
	Deleted    Kind = "deleted"
)

// Valid reports whether k is one of the kinds this version of the package knows. Decode does not reject
// other kinds, so a consumer built against an older package keeps working when a kind is added.
func (k Kind) Valid() bool {
	switch k {
	case Interrupted, Late, Alarm, Recovered, Exhausted, Watchdog, Suppressed, OutageStarted, OutageEnded, Flapping,
		Acked, Silenced, Unsilenced, Deleted:
		return true
	}
	return false
}

// Event is one message on the events topic. Its JSON form is fixed by docs/events.md: field order as declared
// here, times as RFC 3339 in UTC with at most millisecond precision ("2026-11-22T10:00:30.012Z",
// "2026-11-22T10:00:00Z"); a zero time is written as null.
type Event struct {
	Schema      string    `json:"schema"`
	ID          string    `json:"id"`
	Kind        Kind      `json:"kind"`
	DeviceID    string    `json:"device_id"`
	DeviceType  string    `json:"device_type"`
	LastSeen    time.Time `json:"last_seen"` // the device's last signal before the silence
	Deadline    time.Time `json:"deadline"`  // the deadline that passed; the same for every event of one outage
	At          time.Time `json:"at"`        // when heartbeatd raised this event
	SilentForMs int64     `json:"silent_for_ms"`
	Repeat      int       `json:"repeat"`
	// Degraded marks an event raised while a blind window outlived detection.max_hold_back: detection
	// resumed without trusting that silence means a silent device (docs/concepts.md). Written only when true.
	Degraded bool `json:"degraded,omitempty"`
	Detail
}

// Detail is what operator acts, suppressed devices and correlated outages add to an event; each field
// is written only when set, so a detection event carries none of them.
type Detail struct {
	// By and Note are an operator act's author and note, when given.
	By   string `json:"by,omitempty"`
	Note string `json:"note,omitempty"`
	// Token names the API token that acted when the request named someone else as by (docs/access.md).
	Token string `json:"token,omitempty"`
	// Parent is the interrupted parent of a suppressed device.
	Parent string `json:"parent,omitempty"`
	// OutageID names the correlated outage on outage events and on member events raised while it lasts.
	OutageID string `json:"outage_id,omitempty"`
	// Group, Count and Sample describe a correlated outage on outage_started / outage_ended.
	Group  *Group   `json:"group,omitempty"`
	Count  int      `json:"count,omitempty"`
	Sample []string `json:"sample,omitempty"`
	// Cause says why the incident began when it was not silence: CauseReported (the device reported a
	// failure; Reason holds its words) or CauseOffline (its broker said it went offline).
	Cause  string `json:"cause,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// The causes an incident's events may carry; none means the device fell silent.
const (
	CauseReported = "reported"
	CauseOffline  = "offline"
)

// Group is what the devices of a correlated outage share: the correlation key (device_type, parent or
// labels.<name>) and its value.
type Group struct {
	By    string `json:"by"`
	Value string `json:"value"`
}

// ID returns the deterministic event id device/<deadline Unix ms>/kind/repeat. Every re-publication of
// the same event (at-least-once delivery) carries the same id, so consumers can drop duplicates by it.
func ID(device string, deadline time.Time, kind Kind, repeat int) string {
	b := make([]byte, 0, len(device)+len(kind)+32)
	b = append(b, device...)
	b = append(b, '/')
	b = strconv.AppendInt(b, deadline.UnixMilli(), 10)
	b = append(b, '/')
	b = append(b, kind...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(repeat), 10)
	return string(b)
}

// New builds an event with schema, id and silent_for_ms filled in. Times are normalised to UTC and
// truncated to the millisecond the JSON form carries, so an event decoded from the wire equals the one
// that was built. silent_for_ms = at − last_seen (0 when last_seen is unknown or after at).
func New(kind Kind, device, deviceType string, deadline, lastSeen, at time.Time, repeat int) Event {
	deadline, lastSeen, at = normalizeTime(deadline), normalizeTime(lastSeen), normalizeTime(at)
	var silent int64
	if !lastSeen.IsZero() && at.After(lastSeen) {
		silent = at.Sub(lastSeen).Milliseconds()
	}
	return Event{
		Schema:      Schema,
		ID:          ID(device, deadline, kind, repeat),
		Kind:        kind,
		DeviceID:    device,
		DeviceType:  deviceType,
		LastSeen:    lastSeen,
		Deadline:    deadline,
		At:          at,
		SilentForMs: silent,
		Repeat:      repeat,
	}
}

// ErrSchema is returned by Decode for a message that is not a heartbeatd.event/v1 event.
var ErrSchema = errors.New("event: not a " + Schema + " event")

// Decode parses one event value and checks that it is a v1 event naming a device. Unknown fields are
// ignored (fields may be added within v1).
func Decode(b []byte) (Event, error) {
	var e Event
	// UnmarshalJSON itself, not json.Unmarshal: that would check the whole input once more before
	// handing it over (BenchmarkDecode: 4.4 → 2.6 µs).
	if err := e.UnmarshalJSON(b); err != nil {
		return Event{}, fmt.Errorf("event: decode: %w", err)
	}
	if e.Schema != Schema {
		return Event{}, fmt.Errorf("%w (schema %q)", ErrSchema, e.Schema)
	}
	if e.DeviceID == "" || e.ID == "" || e.Kind == "" {
		return Event{}, fmt.Errorf("event: decode: id, kind and device_id are required")
	}
	return e, nil
}

// wireEvent is Event as it travels: the times in their fixed text form.
type wireEvent struct {
	Schema      string   `json:"schema"`
	ID          string   `json:"id"`
	Kind        Kind     `json:"kind"`
	DeviceID    string   `json:"device_id"`
	DeviceType  string   `json:"device_type"`
	LastSeen    wireTime `json:"last_seen"`
	Deadline    wireTime `json:"deadline"`
	At          wireTime `json:"at"`
	SilentForMs int64    `json:"silent_for_ms"`
	Repeat      int      `json:"repeat"`
	Degraded    bool     `json:"degraded,omitempty"`
	Detail
}

// MarshalJSON writes the docs/events.md form: the bytes encoding/json writes for wireEvent (without HTML
// escaping), appended by hand. Encoding every event by reflection was a fifth of the alarm loop's CPU
// during an expiry storm (profile of hbbench -scenarios expiry); TestMarshalJSONMatchesEncodingJSON
// keeps the two identical.
func (e Event) MarshalJSON() ([]byte, error) {
	// ≈ 260 bytes besides the id, device and type: the keys, the schema, three times, two numbers and
	// the degraded flag. Sized to hold all of it, so the buffer never grows.
	b := make([]byte, 0, 304+len(e.ID)+len(e.DeviceID)+len(e.DeviceType))
	b = append(b, `{"schema":`...)
	b = appendJSONString(b, e.Schema)
	b = append(b, `,"id":`...)
	b = appendJSONString(b, e.ID)
	b = append(b, `,"kind":`...)
	b = appendJSONString(b, string(e.Kind))
	b = append(b, `,"device_id":`...)
	b = appendJSONString(b, e.DeviceID)
	b = append(b, `,"device_type":`...)
	b = appendJSONString(b, e.DeviceType)
	b = append(b, `,"last_seen":`...)
	b = appendWireTime(b, e.LastSeen)
	b = append(b, `,"deadline":`...)
	b = appendWireTime(b, e.Deadline)
	b = append(b, `,"at":`...)
	b = appendWireTime(b, e.At)
	b = append(b, `,"silent_for_ms":`...)
	b = strconv.AppendInt(b, e.SilentForMs, 10)
	b = append(b, `,"repeat":`...)
	b = strconv.AppendInt(b, int64(e.Repeat), 10)
	if e.Degraded {
		b = append(b, `,"degraded":true`...)
	}
	if e.hasExtras() {
		return e.appendExtras(b), nil
	}
	return append(b, '}'), nil
}

// hasExtras reports whether any field beyond the detection ones is set: the common event skips them all.
func (e *Detail) hasExtras() bool {
	return e.By != "" || e.Note != "" || e.Token != "" || e.Parent != "" || e.OutageID != "" || e.Group != nil || e.Count != 0 || len(e.Sample) > 0 ||
		e.Cause != "" || e.Reason != ""
}

// appendExtras appends the optional fields of operator acts, suppressed and outage events and causes, and the
// closing brace, in declaration order.
func (e *Detail) appendExtras(b []byte) []byte {
	str := func(key, v string) {
		if v != "" {
			b = append(b, `,"`+key+`":`...)
			b = appendJSONString(b, v)
		}
	}
	str("by", e.By)
	str("note", e.Note)
	str("token", e.Token)
	str("parent", e.Parent)
	str("outage_id", e.OutageID)
	if e.Group != nil {
		b = append(b, `,"group":{"by":`...)
		b = appendJSONString(b, e.Group.By)
		b = append(b, `,"value":`...)
		b = appendJSONString(b, e.Group.Value)
		b = append(b, '}')
	}
	// An outage event always carries its count and sample (docs/events.md), 0 and [] included: the only place
	// this encoder writes what encoding/json's omitempty would leave out.
	if e.Count != 0 || e.Group != nil {
		b = append(b, `,"count":`...)
		b = strconv.AppendInt(b, int64(e.Count), 10)
	}
	if e.Group != nil && len(e.Sample) == 0 {
		b = append(b, `,"sample":[]`...)
	}
	if len(e.Sample) > 0 {
		b = append(b, `,"sample":[`...)
		for i, id := range e.Sample {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, id)
		}
		b = append(b, ']')
	}
	str("cause", e.Cause)
	str("reason", e.Reason)
	return append(b, '}')
}

// appendJSONString appends s as a JSON string the way encoding/json does without HTML escaping. Plain
// printable ASCII, what device ids nearly always are, is copied; anything else goes through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			q, _ := marshalNoHTMLEscape(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendWireTime appends t quoted in timeLayout, or null for the zero time. The digits are written
// directly: time.AppendFormat parses the layout on every call and was most of an event's encoding cost.
func appendWireTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, "null"...)
	}
	t = normalizeTime(t)
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		b = append(b, '"')
		b = t.AppendFormat(b, timeLayout)
		return append(b, '"')
	}
	hour, minute, sec := t.Clock()
	b = append(b, '"')
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, minute, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	if ms := t.Nanosecond() / int(time.Millisecond); ms != 0 {
		// ".999": up to three digits, trailing zeros dropped.
		b = append(b, '.')
		digits := 3
		for ms%10 == 0 {
			ms /= 10
			digits--
		}
		b = appendDigits(b, ms, digits)
	}
	return append(b, 'Z', '"')
}

// appendDigits appends n (≥ 0) zero-padded to width digits.
func appendDigits(b []byte, n, width int) []byte {
	var buf [4]byte
	for i := width - 1; i >= 0; i-- {
		buf[i] = byte('0' + n%10)
		n /= 10
	}
	return append(b, buf[:width]...)
}

// UnmarshalJSON reads the docs/events.md form; any RFC 3339 time is accepted.
func (e *Event) UnmarshalJSON(b []byte) error {
	var w wireEvent
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*e = Event{
		Schema: w.Schema, ID: w.ID, Kind: w.Kind, DeviceID: w.DeviceID, DeviceType: w.DeviceType,
		LastSeen: time.Time(w.LastSeen), Deadline: time.Time(w.Deadline), At: time.Time(w.At),
		SilentForMs: w.SilentForMs, Repeat: w.Repeat, Degraded: w.Degraded,
		Detail: w.Detail,
	}
	return nil
}

// timeLayout is RFC 3339 with up to three fraction digits, trailing zeros dropped: whole seconds print
// as "…:00Z", as in the example of docs/events.md.
const timeLayout = "2006-01-02T15:04:05.999Z07:00"

// normalizeTime brings a time to what the wire carries: UTC, whole milliseconds, no monotonic reading.
func normalizeTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Millisecond)
}

// wireTime renders a time in the one text form every message of this package uses.
type wireTime time.Time

func (t wireTime) MarshalJSON() ([]byte, error) {
	return appendWireTime(make([]byte, 0, len(timeLayout)+2), time.Time(t)), nil
}

func (t *wireTime) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*t = wireTime{}
		return nil
	}
	var tt time.Time
	if err := tt.UnmarshalJSON(b); err != nil {
		return err
	}
	*t = wireTime(tt.UTC())
	return nil
}

// marshalNoHTMLEscape is json.Marshal without escaping <, > and &: device ids and topics reach
// consumers and kcat readers as written.
func marshalNoHTMLEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}
