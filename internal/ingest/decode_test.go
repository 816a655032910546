package ingest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/ident"
)

func TestDecode(t *testing.T) {
	ts := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		msg    Message
		want   decoded
		reason string
	}{
		{name: "empty payload, device from topic", msg: Message{Device: "d1"}, want: decoded{device: "d1"}},
		{name: "arbitrary bytes", msg: Message{Device: "d1", Payload: []byte{0xff, 0x00, 'x'}}, want: decoded{device: "d1"}},
		{name: "JSON array is opaque", msg: Message{Device: "d1", Payload: []byte(`[1,2]`)}, want: decoded{device: "d1"}},
		{name: "topic type", msg: Message{Device: "d1", Type: "gateway"}, want: decoded{device: "d1", typ: "gateway"}},
		{name: "kafka key", msg: Message{Key: []byte("k1")}, want: decoded{device: "k1"}},
		{name: "payload device names it without topic or key", msg: Message{Payload: []byte(`{"device_id":"p1"}`)}, want: decoded{device: "p1"}},
		{name: "payload device equal to key", msg: Message{Key: []byte("k1"), Payload: []byte(`{"device_id":"k1"}`)}, want: decoded{device: "k1"}},
		{name: "payload device equal to topic", msg: Message{Device: "t1", Payload: []byte(`{"device_id":"t1"}`)}, want: decoded{device: "t1"}},
		{name: "payload type wins over topic", msg: Message{Device: "d", Type: "a", Payload: []byte(`{"type":"b"}`)}, want: decoded{device: "d", typ: "b"}},
		{name: "null and empty fields are absent", msg: Message{Key: []byte("k"), Payload: []byte(`{"device_id":null,"type":"","ts":null}`)}, want: decoded{device: "k"}},
		{name: "escaped id", msg: Message{Payload: []byte(`{"device_id":"d\u00e9v"}`)}, want: decoded{device: "dév"}},
		{name: "leading whitespace", msg: Message{Payload: []byte(" \n\t{\"device_id\":\"d\"}")}, want: decoded{device: "d"}},
		{name: "other fields ignored", msg: Message{Payload: []byte(`{"device_id":"d","temp":21.5,"nested":{"ts":"x"},"list":[1]}`)}, want: decoded{device: "d"}},
		{name: "ts seconds", msg: Message{Device: "d", Payload: []byte(`{"ts":1795341600}`)}, want: decoded{device: "d", ts: ts}},
		{name: "ts fractional seconds", msg: Message{Device: "d", Payload: []byte(`{"ts":1795341600.25}`)}, want: decoded{device: "d", ts: ts.Add(250 * time.Millisecond)}},
		{name: "ts milliseconds", msg: Message{Device: "d", Payload: []byte(`{"ts":1795341600000}`)}, want: decoded{device: "d", ts: ts}},
		{name: "ts exponent", msg: Message{Device: "d", Payload: []byte(`{"ts":1.7953416e12}`)}, want: decoded{device: "d", ts: ts}},
		{name: "ts RFC 3339", msg: Message{Device: "d", Payload: []byte(`{"ts":"2026-11-22T11:00:00+01:00"}`)}, want: decoded{device: "d", ts: ts}},
		{name: "ts RFC 3339 fraction", msg: Message{Device: "d", Payload: []byte(`{"ts":"2026-11-22T10:00:00.5Z"}`)}, want: decoded{device: "d", ts: ts.Add(500 * time.Millisecond)}},

		{name: "reported failure", msg: Message{Device: "d", Payload: []byte(`{"status":"fail","reason":"valve stuck"}`)}, want: decoded{device: "d", fail: true, reason: "valve stuck"}},
		{name: "failure without reason", msg: Message{Device: "d", Payload: []byte(`{"status":"fail"}`)}, want: decoded{device: "d", fail: true}},
		{name: "other status is a signal, its reason ignored", msg: Message{Device: "d", Payload: []byte(`{"status":"running","reason":7}`)}, want: decoded{device: "d"}},
		{name: "reason at limit", msg: Message{Device: "d", Payload: []byte(`{"status":"fail","reason":"` + strings.Repeat("r", MaxReasonLen) + `"}`)},
			want: decoded{device: "d", fail: true, reason: strings.Repeat("r", MaxReasonLen)}},
		{name: "reason too long", msg: Message{Device: "d", Payload: []byte(`{"status":"fail","reason":"` + strings.Repeat("r", MaxReasonLen+1) + `"}`)}, reason: ReasonBadReason},
		{name: "reason not a string", msg: Message{Device: "d", Payload: []byte(`{"status":"fail","reason":{"code":3}}`)}, reason: ReasonBadReason},
		{name: "oversize", msg: Message{Device: "d", Payload: make([]byte, MaxPayload+1)}, reason: ReasonOversize},
		{name: "limit size is fine", msg: Message{Device: "d", Payload: make([]byte, MaxPayload)}, want: decoded{device: "d"}},
		{name: "no device", msg: Message{Payload: []byte(`{"type":"gateway"}`)}, reason: ReasonNoDeviceID},
		{name: "no device, empty payload", msg: Message{}, reason: ReasonNoDeviceID},
		{name: "device too long", msg: Message{Device: strings.Repeat("x", MaxIDLen+1)}, reason: ReasonInvalidDeviceID},
		{name: "device at limit", msg: Message{Device: strings.Repeat("x", MaxIDLen)}, want: decoded{device: strings.Repeat("x", MaxIDLen)}},
		{name: "device control char", msg: Message{Payload: []byte(`{"device_id":"a\nb"}`)}, reason: ReasonInvalidDeviceID},
		{name: "device DEL", msg: Message{Device: "a\x7fb"}, reason: ReasonInvalidDeviceID},
		{name: "device C1 control", msg: Message{Device: "a\u0085b"}, reason: ReasonInvalidDeviceID},
		{name: "device invalid UTF-8 key", msg: Message{Key: []byte{'a', 0xff}}, reason: ReasonInvalidDeviceID},
		{name: "device invalid UTF-8 in JSON", msg: Message{Payload: []byte("{\"device_id\":\"a\xffb\"}")}, reason: ReasonInvalidDeviceID},
		{name: "device not a string", msg: Message{Payload: []byte(`{"device_id":42}`)}, reason: ReasonInvalidDeviceID},
		{name: "type not a string", msg: Message{Device: "d", Payload: []byte(`{"type":["a"]}`)}, reason: ReasonInvalidType},
		{name: "type with control char", msg: Message{Device: "d", Payload: []byte(`{"type":"a\tb"}`)}, reason: ReasonInvalidType},
		// Invisible characters (Unicode category Cf) would let one id pass for another on a screen: each
		// way an id, a parent or a type name comes in refuses them, as it refuses control characters.
		{name: "topic device with a right-to-left override", msg: Message{Device: "meter-1\u202e"}, reason: ReasonInvalidDeviceID},
		{name: "Kafka key with a zero-width space", msg: Message{Key: []byte("meter\u200b-1")}, reason: ReasonInvalidDeviceID},
		{name: "payload device with a BOM", msg: Message{Payload: []byte("{\"device_id\":\"\ufeffmeter-1\"}")}, reason: ReasonInvalidDeviceID},
		{name: "payload device with an escaped override", msg: Message{Payload: []byte(`{"device_id":"meter-1\u202e"}`)}, reason: ReasonInvalidDeviceID},
		{name: "payload type with a zero-width joiner", msg: Message{Device: "d", Payload: []byte(`{"type":"met\u200der"}`)}, reason: ReasonInvalidType},
		{name: "topic type with an isolate", msg: Message{Device: "d", Type: "meter\u2066"}, reason: ReasonInvalidType},
		{name: "payload parent with an override", msg: Message{Device: "d", Payload: []byte(`{"parent":"gw\u202e1"}`)}, reason: ReasonInvalidDeviceID},
		{name: "topic parent with a soft hyphen", msg: Message{Device: "d", Parent: "gw\u00ad1"}, reason: ReasonInvalidDeviceID},
		{name: "payload device differs from key", msg: Message{Key: []byte("k1"), Payload: []byte(`{"device_id":"p1"}`)}, reason: ReasonIDMismatch},
		{name: "payload device differs from topic", msg: Message{Device: "t1", Payload: []byte(`{"device_id":"p1"}`)}, reason: ReasonIDMismatch},
		{name: "ids compare exactly", msg: Message{Device: "dev", Payload: []byte(`{"device_id":"DEV"}`)}, reason: ReasonIDMismatch},
		{name: "payload device differs from topic and key", msg: Message{Device: "t1", Key: []byte("t1"), Payload: []byte(`{"device_id":"p1"}`)}, reason: ReasonIDMismatch},
		{name: "invalid key with a payload device", msg: Message{Key: []byte(strings.Repeat("k", MaxIDLen+1)), Payload: []byte(`{"device_id":"p1"}`)}, reason: ReasonInvalidDeviceID},
		{name: "invalid topic device with the same payload device", msg: Message{Device: "a\x01", Payload: []byte(`{"device_id":"a\u0001"}`)}, reason: ReasonInvalidDeviceID},
		{name: "invalid payload device beside a topic device", msg: Message{Device: "t1", Payload: []byte(`{"device_id":"a\u0000"}`)}, reason: ReasonInvalidDeviceID},
		// devices//heartbeat: the topic's {device_id} level is empty. The payload must not name the device
		// in its place (a publisher on that topic could speak for any device): bad input.
		{name: "empty topic device level", msg: Message{TopicDevice: true}, reason: ReasonInvalidDeviceID},
		{name: "empty topic device level with a payload device", msg: Message{TopicDevice: true, Payload: []byte(`{"device_id":"p1"}`)}, reason: ReasonInvalidDeviceID},
		{name: "empty topic device level with a failure", msg: Message{TopicDevice: true, Payload: []byte(`{"device_id":"p1","status":"fail"}`)}, reason: ReasonInvalidDeviceID},
		{name: "malformed JSON", msg: Message{Device: "d", Payload: []byte(`{"device_id":"d"`)}, reason: ReasonMalformedJSON},
		{name: "trailing garbage", msg: Message{Device: "d", Payload: []byte(`{"device_id":"d"} x`)}, reason: ReasonMalformedJSON},
		{name: "ts garbage string", msg: Message{Device: "d", Payload: []byte(`{"ts":"yesterday"}`)}, reason: ReasonBadTS},
		{name: "ts numeric string", msg: Message{Device: "d", Payload: []byte(`{"ts":"1795341600"}`)}, reason: ReasonBadTS},
		{name: "ts negative", msg: Message{Device: "d", Payload: []byte(`{"ts":-1}`)}, reason: ReasonBadTS},
		{name: "ts huge", msg: Message{Device: "d", Payload: []byte(`{"ts":1e300}`)}, reason: ReasonBadTS},
		{name: "ts bool", msg: Message{Device: "d", Payload: []byte(`{"ts":true}`)}, reason: ReasonBadTS},
		{name: "ts object", msg: Message{Device: "d", Payload: []byte(`{"ts":{}}`)}, reason: ReasonBadTS},
		{name: "ts before 1970", msg: Message{Device: "d", Payload: []byte(`{"ts":"1969-12-31T23:59:59Z"}`)}, reason: ReasonBadTS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := decode(&tc.msg)
			require.Equal(t, tc.reason, reason)
			if tc.reason != "" {
				return
			}
			require.Equal(t, tc.want.device, got.device)
			require.Equal(t, tc.want.typ, got.typ)
			require.True(t, tc.want.ts.Equal(got.ts), "ts: want %v, got %v", tc.want.ts, got.ts)
		})
	}
}

// referenceFields decodes an object payload with encoding/json: the behaviour scanObject must match.
// reasons holds every field error it finds (scanObject reports one of them).
func referenceFields(payload []byte) (f objectFields, reasons []string) {
	if !json.Valid(payload) {
		return f, []string{ReasonMalformedJSON}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(payload, &m); err != nil {
		return f, []string{ReasonMalformedJSON}
	}
	str := func(raw json.RawMessage, reason string) string {
		var v any
		_ = json.Unmarshal(raw, &v)
		switch v := v.(type) {
		case nil:
			return ""
		case string:
			if bytes.IndexByte(raw, '\\') < 0 {
				return string(raw[1 : len(raw)-1]) // keep invalid UTF-8 as sent, as scanObject does
			}
			return v
		}
		reasons = append(reasons, reason)
		return ""
	}
	if raw, ok := m["device_id"]; ok {
		f.device = str(raw, ReasonInvalidDeviceID)
	}
	if raw, ok := m["type"]; ok {
		f.typ = str(raw, ReasonInvalidType)
	}
	if raw, ok := m["parent"]; ok {
		f.parent = str(raw, ReasonInvalidDeviceID)
	}
	if raw, ok := m["ts"]; ok {
		t, ok := tsValue(raw)
		if !ok {
			reasons = append(reasons, ReasonBadTS)
		}
		f.ts = t
	}
	if raw, ok := m["status"]; ok {
		var status string
		f.fail = json.Unmarshal(raw, &status) == nil && status == statusFail
	}
	if raw, ok := m["reason"]; ok && f.fail {
		if f.reason = strings.ToValidUTF8(str(raw, ReasonBadReason), "\uFFFD"); len(f.reason) > MaxReasonLen {
			reasons = append(reasons, ReasonBadReason)
		}
	}
	return f, reasons
}

func TestScanObjectDepthAsEncodingJSON(t *testing.T) {
	for _, depth := range []int{maxJSONDepth - 1, maxJSONDepth} {
		p := []byte(`{"a":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`)
		_, reason := scanObject(p)
		require.Equal(t, json.Valid(p), reason == "", "depth %d", depth)
	}
	p := []byte(`{"a":` + strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth) + `}`)
	_, reason := scanObject(p)
	require.False(t, json.Valid(p))
	require.Equal(t, ReasonMalformedJSON, reason)
}

// FuzzDecodePayload: decode never panics, and whatever it accepts has a valid device id (and type); the
// object scanner agrees with encoding/json on validity and on the fields.
func FuzzDecodePayload(f *testing.F) {
	for _, seed := range []string{
		``, `x`, `{}`, `{"device_id":"d"}`, `{"device_id":"d","type":"gateway","ts":1795341600}`,
		`{"ts":"2026-11-22T10:00:00Z"}`, `{"ts":1795341600000.5}`, `{"device_id":"\u0000"}`, `{"device_id":42}`,
		`{"type":{"a":1}}`, ` {"device_id":"a"`, `[{"device_id":"d"}]`, `{"device_id":"d","device_id":"e"}`,
		`{"device_id":5,"device_id":"d"}`, `{"dev\u0069ce_id":"esc"}`, `{"a":[1,-0.5e+3,true,null,"\ud83d\ude00"]}`,
		`{"Device_ID":"case"}`, `{"a":01}`, `{"a":1.}`, `{"a":"\x"}`, "{\"a\":\"\x01\"}",
		`{"device_id":"topic-dev"}`, `{"device_id":"key"}`, `{"device_id":"other","type":"gateway"}`, `{"parent":"gw-1"}`, `{"parent":7}`,
		`{"status":"fail","reason":"x"}`, `{"status":"fail","reason":5}`, `{"reason":"r","status":"fail","status":"ok"}`, `{"status":"fail","reason":"\xff"}`,
	} {
		f.Add([]byte(seed), "topic-dev", []byte("key"))
		f.Add([]byte(seed), "", []byte("key"))
		f.Add([]byte(seed), "", []byte(nil))
	}
	f.Fuzz(func(t *testing.T, payload []byte, topicDevice string, key []byte) {
		if isJSONObject(payload) {
			got, reason := scanObject(payload)
			want, reasons := referenceFields(payload)
			if len(reasons) == 0 {
				require.Empty(t, reason, "%q", payload)
				require.Equal(t, want.device, got.device, "%q", payload)
				require.Equal(t, want.typ, got.typ, "%q", payload)
				require.True(t, want.ts.Equal(got.ts), "%q", payload)
				require.Equal(t, want.fail, got.fail, "%q", payload)
				require.Equal(t, want.reason, got.reason, "%q", payload)
			} else {
				require.Contains(t, reasons, reason, "%q", payload)
			}
		}
		m := Message{Device: topicDevice, Key: key, Payload: payload}
		d, reason := decode(&m)
		named := cmp.Or(topicDevice, string(key))
		if reason != "" {
			require.Contains(t, Reasons, reason)
			if reason == ReasonIDMismatch && named == "" {
				t.Fatalf("id_mismatch without a device named by the transport: %q", payload)
			}
			return
		}
		if !ident.Valid(d.device) || !utf8.ValidString(d.device) {
			t.Fatalf("accepted invalid device id %q", d.device)
		}
		// Identity is bound by the transport: where the topic or key names a device, that is the device.
		if named != "" && d.device != named {
			t.Fatalf("accepted device %q where the transport names %q", d.device, named)
		}
		if d.typ != "" && !ident.Valid(d.typ) {
			t.Fatalf("accepted invalid type %q", d.typ)
		}
		if !d.ts.IsZero() && (d.ts.Before(time.Unix(0, 0)) || d.ts.UnixMilli() >= maxTSMillis) {
			t.Fatalf("accepted ts %v", d.ts)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	for _, bc := range []struct {
		name string
		msg  Message
	}{
		{"empty", Message{Device: "device-00000042"}},
		{"json-full", Message{Payload: []byte(`{"device_id":"device-00000042","type":"gateway","ts":1795341600000,"temp":21.5}`)}},
		{"json-rfc3339", Message{Payload: []byte(`{"device_id":"device-00000042","ts":"2026-11-22T10:00:00.123Z"}`)}},
		{"kafka-key", Message{Key: []byte("device-00000042"), Payload: []byte(`{"type":"gateway"}`)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, reason := decode(&bc.msg); reason != "" {
					b.Fatal(reason)
				}
			}
		})
	}
}
