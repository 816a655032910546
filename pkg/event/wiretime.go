package event

import "time"

// AppendTime appends t as every time of an event is written (RFC 3339, UTC, at most millisecond
// precision: "2026-11-22T10:00:30.012Z"), without quotes; nothing for the zero time. The publisher's
// ce_time header uses it, so the header equals the event's at byte for byte.
func AppendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return b
	}
	// appendWireTime writes the quoted JSON form; its digits are the costly part, so reuse them and
	// move the text over the opening quote.
	n := len(b)
	b = appendWireTime(b, t)
	copy(b[n:], b[n+1:len(b)-1])
	return b[:len(b)-2]
}
