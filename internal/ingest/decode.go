package ingest

import (
	"time"

	"github.com/heartbeatd/heartbeatd/internal/ident"
)

// Dead-letter reasons (docs/signals.md): a fixed set, so the deadletters_total{reason} label stays bounded.
const (
	ReasonNoDeviceID      = "no_device_id"
	ReasonInvalidDeviceID = "invalid_device_id"
	// ReasonInvalidType is a `type` that is not a string, or a type name (payload or topic) that breaks
	// the device-id rules: a reason of its own, since folding it into invalid_device_id or malformed_json
	// would send an operator looking at the wrong field.
	ReasonInvalidType   = "invalid_type"
	ReasonMalformedJSON = "malformed_json"
	ReasonBadTS         = "bad_ts"
	ReasonOversize      = "oversize"
	// ReasonIDMismatch is a payload device_id that differs from the device the MQTT topic or Kafka key
	// names: identity is bound by the transport (docs/signals.md), so a publisher allowed on one topic cannot
	// keep another device alive.
	ReasonIDMismatch = "id_mismatch"
	// ReasonBadReason is a reported failure whose `reason` is not a string or longer than MaxReasonLen:
	// rejected rather than cut, so the sender learns that its words did not arrive whole.
	ReasonBadReason = "bad_reason"
)

// statusFail is the `status` of a reported failure (docs/signals.md).
const statusFail = "fail"

// MaxReasonLen bounds a reported failure's reason, in bytes: it travels in every event of the incident.
const MaxReasonLen = 256

// Reasons lists every dead-letter reason, for dashboards and tests.
var Reasons = []string{ReasonNoDeviceID, ReasonInvalidDeviceID, ReasonInvalidType, ReasonMalformedJSON, ReasonBadTS, ReasonOversize,
	ReasonIDMismatch, ReasonBadReason}

// Limits (docs/signals.md).
const (
	MaxPayload = 64 << 10     // bytes
	MaxIDLen   = ident.MaxLen // bytes of UTF-8, for device ids and type names
)

// maxTSMillis bounds a numeric ts (and, /1000, a ts in seconds) to the year 5138: beyond it a number is
// no timestamp, and the conversion to int64 nanoseconds would overflow.
const maxTSMillis = 1e14

// decoded is what a message says about its signal.
type decoded struct {
	device string
	typ    string
	parent string    // the device's gateway or cell (docs/concepts.md): payload `parent`, else the topic's
	ts     time.Time // zero: the payload carries no ts
	fail   bool      // a reported failure, with its reason
	reason string
}

// decode reads a message. The device is the one the MQTT topic or the Kafka key names; a payload
// device_id must then be the same (else id_mismatch), and names the device only where neither names one.
// A topic whose template has a {device_id} level names one, even when the level is empty
// (invalid_device_id).
// The payload's type wins over the topic's. It returns the dead-letter reason for bad input, "" for a
// valid signal.
func decode(m *Message) (decoded, string) {
	if len(m.Payload) > MaxPayload {
		return decoded{}, ReasonOversize
	}
	var d decoded
	object := isJSONObject(m.Payload)
	if m.ObjectOnly && !object {
		return decoded{}, ReasonMalformedJSON
	}
	if object {
		f, reason := scanObject(m.Payload)
		if reason != "" {
			return decoded{}, reason
		}
		d = decoded{device: f.device, typ: f.typ, parent: f.parent, ts: f.ts, fail: f.fail, reason: f.reason}
		if d.device != "" && !ident.Valid(d.device) {
			return decoded{}, ReasonInvalidDeviceID // the field itself is wrong, whatever the transport names
		}
	}
	switch {
	case m.Device != "" || m.TopicDevice:
		// The topic names the device, even an empty level of it: a payload device_id never stands in
		// for an empty {device_id}, which would let any publisher on devices//heartbeat speak for any device.
		if !ident.Valid(m.Device) {
			return decoded{}, ReasonInvalidDeviceID
		}
		if d.device != "" && d.device != m.Device {
			return decoded{}, ReasonIDMismatch
		}
		d.device = m.Device
	case len(m.Key) > 0:
		if !ident.Valid(m.Key) {
			return decoded{}, ReasonInvalidDeviceID
		}
		if d.device != "" && d.device != string(m.Key) {
			return decoded{}, ReasonIDMismatch
		}
		if d.device == "" {
			d.device = string(m.Key)
		}
	case d.device == "":
		return decoded{}, ReasonNoDeviceID
	}
	if d.typ == "" {
		d.typ = m.Type
	}
	if d.typ != "" && !ident.Valid(d.typ) {
		return decoded{}, ReasonInvalidType
	}
	if d.parent == "" {
		d.parent = m.Parent
	}
	if d.parent != "" && (!ident.Valid(d.parent) || d.parent == d.device) {
		return decoded{}, ReasonInvalidDeviceID // a parent is a device id; a device is not its own parent
	}
	return d, ""
}

// Identify reads m as the chain will (the same decode), without submitting it: the device and type it
// names, or the dead-letter reason it would get. The API checks a scoped token's signals with it.
func Identify(m *Message) (device, typ, reason string) {
	d, reason := decode(m)
	return d.device, d.typ, reason
}

// isJSONObject reports whether a payload is meant as a JSON object: its first non-space byte is '{'.
// Anything else (empty, arbitrary bytes, other JSON values) is an opaque heartbeat.
func isJSONObject(p []byte) bool {
	for _, c := range p {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '{':
			return true
		default:
			return false
		}
	}
	return false
}
