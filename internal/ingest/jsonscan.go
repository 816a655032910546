package ingest

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"
)

// The signal decoder is on the path of every message. encoding/json costs ~800ns and 6 allocations for a
// small object here (measured: BenchmarkDecode); this scanner validates the whole payload exactly as
// json.Valid does and extracts the three fields in one pass, allocating only the strings it returns.
// FuzzDecodePayload checks it against encoding/json.

// maxJSONDepth is encoding/json's nesting limit, so both agree on what is valid.
const maxJSONDepth = 10000

// objectFields are the signal fields found in a JSON object payload.
type objectFields struct {
	device, typ, parent string
	ts                  time.Time
	// fail: `"status": "fail"`, a reported failure (docs/signals.md); reason is then its `reason`. Any other
	// status is an ordinary signal, so telemetry that carries a status of its own keeps working.
	fail   bool
	reason string
}

// scanObject parses payload, which starts with '{' after whitespace. reason is "" for a valid object,
// ReasonMalformedJSON when the payload is not valid JSON, else the first field's reason.
func scanObject(payload []byte) (f objectFields, reason string) {
	s := jsonScanner{b: payload}
	s.ws()
	s.object(&f, 0)
	s.ws()
	switch {
	case s.bad || s.i != len(s.b):
		return objectFields{}, ReasonMalformedJSON
	case s.badDevice, s.badParent:
		return objectFields{}, ReasonInvalidDeviceID
	case s.badType:
		return objectFields{}, ReasonInvalidType
	case s.badTS:
		return objectFields{}, ReasonBadTS
	case f.fail && (s.badReason || len(f.reason) > MaxReasonLen):
		return objectFields{}, ReasonBadReason
	}
	if !f.fail {
		f.reason = ""
	}
	return f, ""
}

type jsonScanner struct {
	b   []byte
	i   int
	bad bool // a syntax error: the payload is malformed
	// Field errors, kept while the rest is still checked for syntax; a later duplicate key replaces an
	// earlier one, error included, as encoding/json would.
	badDevice, badType, badTS, badParent, badReason bool
}

func (s *jsonScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// object parses an object; top (f != nil) extracts the signal fields from its members.
func (s *jsonScanner) object(f *objectFields, depth int) {
	if depth >= maxJSONDepth || s.i >= len(s.b) || s.b[s.i] != '{' {
		s.bad = true
		return
	}
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return
	}
	for !s.bad {
		s.ws()
		kStart := s.i
		escaped := s.str()
		if s.bad {
			return
		}
		key := s.b[kStart+1 : s.i-1]
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			s.bad = true
			return
		}
		s.i++
		s.ws()
		vStart := s.i
		s.value(depth + 1)
		if s.bad {
			return
		}
		if f != nil {
			if escaped {
				key = unescapeKey(key)
			}
			s.member(f, string(key), s.b[vStart:s.i])
		}
		if !s.more('}') {
			return
		}
	}
}

// more reads what follows a member or an element: a comma (more follow) or the container's end; anything
// else makes the payload bad. It reports whether the container goes on.
func (s *jsonScanner) more(end byte) bool {
	s.ws()
	if s.i >= len(s.b) {
		s.bad = true
		return false
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		return true
	case end:
		s.i++
		return false
	}
	s.bad = true
	return false
}

// member takes a top-level member's (already validated) value. Later duplicates win, as in
// encoding/json.
func (s *jsonScanner) member(f *objectFields, key string, v []byte) {
	switch key {
	case "device_id":
		f.device, s.badDevice = stringField(v)
	case "parent":
		f.parent, s.badParent = stringField(v)
	case "type":
		f.typ, s.badType = stringField(v)
	case "status":
		status, _ := stringValue(v)
		f.fail = status == statusFail
	case "reason":
		f.reason, s.badReason = stringField(v)
		f.reason = strings.ToValidUTF8(f.reason, "\uFFFD")
	case "ts":
		t, ok := tsValue(v)
		f.ts, s.badTS = t, !ok
		if !ok {
			f.ts = time.Time{}
		}
	}
}

// stringField reads a string member: its value, or "" and bad when it is not a JSON string.
func stringField(v []byte) (str string, bad bool) {
	str, ok := stringValue(v)
	if !ok {
		return "", true
	}
	return str, false
}

// unescapeKey decodes a key with escapes (rare); an undecodable one matches no field.
func unescapeKey(k []byte) []byte {
	var s string
	quoted := make([]byte, 0, len(k)+2)
	quoted = append(append(append(quoted, '"'), k...), '"')
	if json.Unmarshal(quoted, &s) != nil {
		return nil
	}
	return []byte(s)
}

// stringValue reads a string or null (""): ok is false for any other JSON value.
func stringValue(v []byte) (string, bool) {
	if string(v) == "null" {
		return "", true
	}
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	inner := v[1 : len(v)-1]
	for _, c := range inner {
		if c == '\\' {
			var str string
			if json.Unmarshal(v, &str) != nil {
				return "", false
			}
			return str, true
		}
	}
	return string(inner), true
}

// tsValue reads `ts`: null (zero time), an RFC 3339 string, or Unix seconds (< 1e11) or milliseconds.
func tsValue(v []byte) (time.Time, bool) {
	if string(v) == "null" {
		return time.Time{}, true
	}
	if len(v) == 0 {
		return time.Time{}, false
	}
	if v[0] == '"' {
		inner := v[1 : len(v)-1]
		for _, c := range inner {
			if c == '\\' {
				return time.Time{}, false // RFC 3339 needs no escapes
			}
		}
		t, err := time.Parse(time.RFC3339, string(inner))
		if err != nil || t.Before(time.Unix(0, 0)) {
			return time.Time{}, false
		}
		return t, true
	}
	if v[0] != '-' && (v[0] < '0' || v[0] > '9') {
		return time.Time{}, false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || f < 0 || math.IsInf(f, 0) {
		return time.Time{}, false
	}
	ms := math.Round(f)
	if f < 1e11 {
		ms = math.Round(f * 1000)
	}
	if ms >= maxTSMillis {
		return time.Time{}, false
	}
	return time.UnixMilli(int64(ms)), true
}

// value skips one JSON value, checking its syntax.
func (s *jsonScanner) value(depth int) {
	if s.i >= len(s.b) {
		s.bad = true
		return
	}
	switch c := s.b[s.i]; {
	case c == '{':
		s.object(nil, depth)
	case c == '[':
		s.array(depth)
	case c == '"':
		s.str()
	case c == '-' || (c >= '0' && c <= '9'):
		s.number()
	case c == 't':
		s.literal("true")
	case c == 'f':
		s.literal("false")
	case c == 'n':
		s.literal("null")
	default:
		s.bad = true
	}
}

func (s *jsonScanner) array(depth int) {
	if depth >= maxJSONDepth {
		s.bad = true
		return
	}
	s.i++ // '['
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return
	}
	for !s.bad {
		s.ws()
		s.value(depth + 1)
		if s.bad || !s.more(']') {
			return
		}
	}
}

// str skips a string and reports whether it has escapes.
func (s *jsonScanner) str() (escaped bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		s.bad = true
		return false
	}
	s.i++
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return escaped
		case c < 0x20:
			s.bad = true
			return false
		case c == '\\':
			escaped = true
			s.i++
			if s.i >= len(s.b) {
				s.bad = true
				return false
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				s.i++
				for range 4 {
					if s.i >= len(s.b) || !isHex(s.b[s.i]) {
						s.bad = true
						return false
					}
					s.i++
				}
			default:
				s.bad = true
				return false
			}
		default:
			s.i++
		}
	}
	s.bad = true
	return false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func (s *jsonScanner) number() {
	b := s.b
	if s.i < len(b) && b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(b) && b[s.i] == '0':
		s.i++
	case s.i < len(b) && b[s.i] >= '1' && b[s.i] <= '9':
		for s.i < len(b) && b[s.i] >= '0' && b[s.i] <= '9' {
			s.i++
		}
	default:
		s.bad = true
		return
	}
	if s.i < len(b) && b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return
		}
	}
	if s.i < len(b) && (b[s.i] == 'e' || b[s.i] == 'E') {
		s.i++
		if s.i < len(b) && (b[s.i] == '+' || b[s.i] == '-') {
			s.i++
		}
		s.digits()
	}
}

// digits skips one or more digits.
func (s *jsonScanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	if s.i == start {
		s.bad = true
		return false
	}
	return true
}

func (s *jsonScanner) literal(lit string) {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		s.bad = true
		return
	}
	s.i += len(lit)
}
