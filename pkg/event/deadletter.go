package event

import (
	"encoding/json"
	"fmt"
	"time"
)

// Dead-letter sources (docs/events.md).
const (
	SourceMQTT  = "mqtt"
	SourceKafka = "kafka"
	SourceHTTP  = "http" // POST /v1/signals or /v1/devices/{id}/signal
)

// MaxDeadLetterPayload and MaxDeadLetterKey are the most of an original payload and Kafka key a dead
// letter carries. Bad input is bounded only by what its broker accepts; copied whole (and base64
// inflates by 4/3) it could exceed the broker's message.max.bytes (1 MiB by default), and a dead letter
// Kafka refuses is lost together with the others written beside it. Cut this way a dead letter stays
// under 100 KiB (a topic name aside), and a burst queued for the topic stays bounded in memory. A valid
// payload is at most 64 KiB and a valid device id 256 bytes, so what is kept shows what was wrong. A cut
// field is marked payload_truncated / key_truncated with its original payload_size / key_size.
const (
	MaxDeadLetterPayload = 64 << 10
	MaxDeadLetterKey     = 1 << 10
)

// DeadLetter is one message on the dead-letter topic: a piece of bad input, why it was rejected and
// where it came from. JSON: {"reason", "source", "topic", "key_b64"?, "key_size"?, "key_truncated"?,
// "payload_b64", "payload_size"?, "payload_truncated"?, "at"}.
type DeadLetter struct {
	Reason string `json:"reason"` // a short, bounded label such as "no_device_id" or "bad_ts"
	Source string `json:"source"` // SourceMQTT, SourceKafka or SourceHTTP
	Topic  string `json:"topic"`  // the MQTT or Kafka topic the input arrived on
	// Key is the Kafka message key of the input, when it had one: there the device id usually travels in
	// the key, and without it an operator could not tell which device sent the bad value. Not in docs/events.md's
	// list; added because the spec's fields alone lose that. Set it with SetKey, which bounds it.
	Key              []byte    `json:"key_b64,omitempty"`
	KeySize          int       `json:"key_size,omitempty"`      // original length, set only when truncated
	KeyTruncated     bool      `json:"key_truncated,omitempty"` // Key holds the first MaxDeadLetterKey bytes
	Payload          []byte    `json:"payload_b64"`
	PayloadSize      int       `json:"payload_size,omitempty"`      // original length, set only when truncated
	PayloadTruncated bool      `json:"payload_truncated,omitempty"` // Payload holds the first MaxDeadLetterPayload bytes
	At               time.Time `json:"at"`
}

// NewDeadLetter builds a dead letter, copying the payload (the caller's buffer may be reused) and cutting
// it to MaxDeadLetterPayload.
func NewDeadLetter(reason, source, topic string, payload []byte, at time.Time) DeadLetter {
	d := DeadLetter{Reason: reason, Source: source, Topic: topic, At: normalizeTime(at)}
	if len(payload) > MaxDeadLetterPayload {
		d.PayloadSize, d.PayloadTruncated = len(payload), true
		payload = payload[:MaxDeadLetterPayload]
	}
	d.Payload = append([]byte{}, payload...)
	return d
}

// SetKey copies key (the input's Kafka key; the caller's buffer may be reused) into d, cut to
// MaxDeadLetterKey. The dead letter's own Kafka key is this copy too.
func (d *DeadLetter) SetKey(key []byte) {
	d.KeySize, d.KeyTruncated = 0, false
	if len(key) > MaxDeadLetterKey {
		d.KeySize, d.KeyTruncated = len(key), true
		key = key[:MaxDeadLetterKey]
	}
	d.Key = append([]byte(nil), key...)
}

type wireDeadLetter struct {
	Reason           string   `json:"reason"`
	Source           string   `json:"source"`
	Topic            string   `json:"topic"`
	Key              []byte   `json:"key_b64,omitempty"`
	KeySize          int      `json:"key_size,omitempty"`
	KeyTruncated     bool     `json:"key_truncated,omitempty"`
	Payload          []byte   `json:"payload_b64"`
	PayloadSize      int      `json:"payload_size,omitempty"`
	PayloadTruncated bool     `json:"payload_truncated,omitempty"`
	At               wireTime `json:"at"`
}

// MarshalJSON writes the dead letter with its time in the same form as events.
func (d DeadLetter) MarshalJSON() ([]byte, error) {
	return marshalNoHTMLEscape(wireDeadLetter{
		Reason: d.Reason, Source: d.Source, Topic: d.Topic, Key: d.Key, KeySize: d.KeySize, KeyTruncated: d.KeyTruncated,
		Payload: d.Payload, PayloadSize: d.PayloadSize, PayloadTruncated: d.PayloadTruncated, At: wireTime(d.At),
	})
}

// UnmarshalJSON reads a dead letter.
func (d *DeadLetter) UnmarshalJSON(b []byte) error {
	var w wireDeadLetter
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*d = DeadLetter{
		Reason: w.Reason, Source: w.Source, Topic: w.Topic, Key: w.Key, KeySize: w.KeySize, KeyTruncated: w.KeyTruncated,
		Payload: w.Payload, PayloadSize: w.PayloadSize, PayloadTruncated: w.PayloadTruncated, At: time.Time(w.At),
	}
	return nil
}

// DecodeDeadLetter parses one dead-letter value.
func DecodeDeadLetter(b []byte) (DeadLetter, error) {
	var d DeadLetter
	if err := json.Unmarshal(b, &d); err != nil {
		return DeadLetter{}, fmt.Errorf("event: decode dead letter: %w", err)
	}
	return d, nil
}
