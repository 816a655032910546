package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// specExample is docs/events.md's example, verbatim.
const specExample = `{
  "schema": "heartbeatd.event/v1",
  "id": "dev-42/1763800230000/interrupted/0",
  "kind": "interrupted",
  "device_id": "dev-42",
  "device_type": "gateway",
  "last_seen": "2026-11-22T10:00:00Z",
  "deadline": "2026-11-22T10:00:30Z",
  "at": "2026-11-22T10:00:30.012Z",
  "silent_for_ms": 30012,
  "repeat": 0
}`

func mustTime(tb testing.TB, s string) time.Time {
	tb.Helper()
	t, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(tb, err)
	return t
}

// The event New builds for the example of docs/events.md must render exactly as that example shows it.
// specExample keeps the id the contract's first example had, "1763800230000" (2025-11-22T08:30:30Z), which
// does not match its deadline (2026-11-22T10:00:30Z = 1795341630000); the golden file and docs/events.md
// carry the consistent id.
func TestEventJSONGolden(t *testing.T) {
	e := New(Interrupted, "dev-42", "gateway",
		mustTime(t, "2026-11-22T10:00:30Z"), mustTime(t, "2026-11-22T10:00:00Z"),
		mustTime(t, "2026-11-22T11:00:30.012345+01:00"), 0)
	got, err := e.MarshalJSON()
	require.NoError(t, err)
	var indented bytes.Buffer
	require.NoError(t, json.Indent(&indented, got, "", "  "))
	indented.WriteByte('\n')

	const golden = "testdata/event_v1.golden.json"
	if *update {
		require.NoError(t, os.WriteFile(golden, indented.Bytes(), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	if diff := cmp.Diff(string(want), indented.String()); diff != "" {
		t.Errorf("event JSON (-want +got):\n%s", diff)
	}
	// Apart from the id, the golden file is that example byte for byte.
	require.Equal(t, specExample+"\n",
		strings.Replace(string(want), "1795341630000", "1763800230000", 1))
}

// The example decodes and re-encodes to the same bytes: field order and time format round-trip.
func TestEventSpecExampleRoundTrip(t *testing.T) {
	e, err := Decode([]byte(specExample))
	require.NoError(t, err)
	require.Equal(t, Interrupted, e.Kind)
	require.Equal(t, mustTime(t, "2026-11-22T10:00:30.012Z"), e.At)

	got, err := e.MarshalJSON()
	require.NoError(t, err)
	var want bytes.Buffer
	require.NoError(t, json.Compact(&want, []byte(specExample)))
	require.Equal(t, want.String(), string(got))
}

func TestID(t *testing.T) {
	deadline := time.UnixMilli(1795341630000)
	require.Equal(t, "dev-42/1795341630000/interrupted/0", ID("dev-42", deadline, Interrupted, 0))
	require.Equal(t, "a/b/1795341630000/alarm/12", ID("a/b", deadline, Alarm, 12))
	// The id depends on the deadline's instant only, not its zone or sub-millisecond part.
	require.Equal(t, ID("d", deadline, Alarm, 1),
		ID("d", deadline.In(time.FixedZone("x", 3600)).Add(999*time.Microsecond), Alarm, 1))
}

func TestNew(t *testing.T) {
	zone := time.FixedZone("CET", 3600)
	deadline := time.Date(2026, 11, 22, 11, 0, 30, 0, zone)
	lastSeen := time.Date(2026, 11, 22, 11, 0, 0, 500_000_000, zone)
	at := time.Date(2026, 11, 22, 11, 5, 0, 123_456_789, zone)

	tests := []struct {
		name       string
		lastSeen   time.Time
		at         time.Time
		wantSilent int64
	}{
		{"silence is at minus last seen", lastSeen, at, 299_623},
		{"unknown last seen", time.Time{}, at, 0},
		{"last seen after at (clock skew)", at.Add(time.Second), at, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := New(Recovered, "dev-1", "sensor", deadline, tt.lastSeen, tt.at, 3)
			require.Equal(t, tt.wantSilent, e.SilentForMs)
			require.Equal(t, Schema, e.Schema)
			require.Equal(t, ID("dev-1", deadline, Recovered, 3), e.ID)
			require.Equal(t, time.UTC, e.At.Location())
			require.Equal(t, 123_000_000, e.At.Nanosecond(), "times are cut to the millisecond the wire carries")

			// What a consumer decodes is what was built.
			b, err := e.MarshalJSON()
			require.NoError(t, err)
			got, err := Decode(b)
			require.NoError(t, err)
			if diff := cmp.Diff(e, got); diff != "" {
				t.Errorf("round trip (-built +decoded):\n%s", diff)
			}
		})
	}
}

func TestTimeFormat(t *testing.T) {
	tests := []struct {
		in   time.Time
		want string
	}{
		{time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), `"2026-01-02T03:04:05Z"`},
		{time.Date(2026, 1, 2, 3, 4, 5, 12_000_000, time.UTC), `"2026-01-02T03:04:05.012Z"`},
		{time.Date(2026, 1, 2, 3, 4, 5, 100_999_999, time.UTC), `"2026-01-02T03:04:05.1Z"`},
		{time.Date(2026, 1, 2, 4, 4, 5, 0, time.FixedZone("", 3600)), `"2026-01-02T03:04:05Z"`},
		{time.Time{}, `null`},
	}
	for _, tt := range tests {
		got, err := wireTime(tt.in).MarshalJSON()
		require.NoError(t, err)
		require.Equal(t, tt.want, string(got), tt.in.String())
	}
}

func TestDecodeRejects(t *testing.T) {
	tests := []struct {
		name  string
		input string
		isErr error
	}{
		{"not json", `{"schema":`, nil},
		{"no schema", `{"id":"x/1/alarm/1","kind":"alarm","device_id":"x"}`, ErrSchema},
		{"other schema", `{"schema":"heartbeatd.event/v2","id":"x/1/alarm/1","kind":"alarm","device_id":"x"}`, ErrSchema},
		{"no device", `{"schema":"heartbeatd.event/v1","id":"x/1/alarm/1","kind":"alarm"}`, nil},
		{"bad time", `{"schema":"heartbeatd.event/v1","id":"x","kind":"alarm","device_id":"x","at":"yesterday"}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode([]byte(tt.input))
			require.Error(t, err)
			require.True(t, strings.HasPrefix(err.Error(), "event: "), err.Error())
			if tt.isErr != nil {
				require.True(t, errors.Is(err, tt.isErr), err.Error())
			}
		})
	}
}

// Fields added later within v1, and kinds this package does not know yet, do not break a consumer.
func TestDecodeForwardCompatible(t *testing.T) {
	e, err := Decode([]byte(`{"schema":"heartbeatd.event/v1","id":"x/1/muted/0","kind":"muted",
		"device_id":"x","device_type":"t","at":"2026-01-02T03:04:05.5+02:00","future_field":{"a":1}}`))
	require.NoError(t, err)
	require.Equal(t, Kind("muted"), e.Kind)
	require.False(t, e.Kind.Valid())
	require.True(t, Alarm.Valid())
	require.Equal(t, time.Date(2026, 1, 2, 1, 4, 5, 500_000_000, time.UTC), e.At)
	require.True(t, e.LastSeen.IsZero())
}

// Device ids reach consumers as written, not as \u003c escapes.
func TestEventNoHTMLEscape(t *testing.T) {
	e := New(Alarm, "<a&b>", "", time.UnixMilli(1), time.UnixMilli(0), time.UnixMilli(2), 1)
	b, err := e.MarshalJSON()
	require.NoError(t, err)
	require.Contains(t, string(b), `"device_id":"<a&b>"`)
	require.Contains(t, string(b), `"id":"<a&b>/1/alarm/1"`)
}

func TestDeadLetterJSON(t *testing.T) {
	payload := []byte{0xff, 0x00, 'x'}
	d := NewDeadLetter("bad_json", SourceKafka, "device-signals", payload, time.Date(2026, 1, 2, 3, 4, 5, 6_789_000, time.UTC))
	payload[0] = 'y' // the caller reuses its buffer
	d.Key = []byte("dev-7")
	b, err := d.MarshalJSON()
	require.NoError(t, err)
	require.Equal(t, `{"reason":"bad_json","source":"kafka","topic":"device-signals","key_b64":"ZGV2LTc=",`+
		`"payload_b64":"/wB4","at":"2026-01-02T03:04:05.006Z"}`, string(b))

	got, err := DecodeDeadLetter(b)
	require.NoError(t, err)
	if diff := cmp.Diff(d, got); diff != "" {
		t.Errorf("dead letter round trip (-want +got):\n%s", diff)
	}

	// Without a key the five fields of docs/events.md's dead letter are all there is.
	b, err = NewDeadLetter("no_device_id", SourceMQTT, "devices//heartbeat", nil, time.UnixMilli(0)).MarshalJSON()
	require.NoError(t, err)
	require.Equal(t, `{"reason":"no_device_id","source":"mqtt","topic":"devices//heartbeat","payload_b64":"",`+
		`"at":"1970-01-01T00:00:00Z"}`, string(b))
}

func TestDeadLetterTruncatesHugePayload(t *testing.T) {
	huge := bytes.Repeat([]byte("a"), MaxDeadLetterPayload+10)
	d := NewDeadLetter("oversize", SourceMQTT, "t", huge, time.Now())
	require.Len(t, d.Payload, MaxDeadLetterPayload)
	require.True(t, d.PayloadTruncated)
	require.Equal(t, MaxDeadLetterPayload+10, d.PayloadSize)

	exact := NewDeadLetter("oversize", SourceMQTT, "t", huge[:MaxDeadLetterPayload], time.Now())
	require.False(t, exact.PayloadTruncated)
	require.Zero(t, exact.PayloadSize)
}

// TestMarshalJSONMatchesEncodingJSON: the hand-written encoder writes exactly what encoding/json writes
// for the wire form, for plain ids and for every kind of character that needs escaping.
func TestMarshalJSONMatchesEncodingJSON(t *testing.T) {
	at := time.Date(2026, 11, 23, 14, 3, 7, 120_000_000, time.UTC)
	ids := []string{"sensor-0042", `quote"d`, `back\slash`, "tab\there", "ünïcödé-✓", "<html>&amp;", "line\u2028sep",
		"bad\xffutf8", "del\x7f", ""}
	for _, id := range ids {
		degraded := New(Alarm, id, "gateway", at.Add(-time.Second), at.Add(-time.Minute), at, 1)
		degraded.Degraded = true
		acked := New(Acked, id, "gateway", at, time.Time{}, at, 0)
		acked.By, acked.Note = id, "on it "+id
		suppressed := New(Suppressed, id, "sensor", at, at, at, 0)
		suppressed.Parent, suppressed.OutageID = id, "outage:parent:"+id
		outage := New(OutageStarted, "outage:labels.site:"+id, "", time.Time{}, time.Time{}, at, 0)
		outage.OutageID, outage.Group, outage.Count, outage.Sample = "o-1", &Group{By: "labels.site", Value: id}, 512, []string{id, "b"}
		reported := New(Interrupted, id, "gateway", at, at, at, 0)
		reported.Cause, reported.Reason = CauseReported, "pump stalled: "+id
		for _, e := range []Event{
			New(Interrupted, id, "gateway", at.Add(-time.Second), at.Add(-time.Minute), at, 0),
			New(Recovered, id, id, at, time.Time{}, at.Add(1500*time.Microsecond), 3),
			degraded, acked, suppressed, outage, reported,
		} {
			want, err := marshalNoHTMLEscape(wireEvent{
				Schema: e.Schema, ID: e.ID, Kind: e.Kind, DeviceID: e.DeviceID, DeviceType: e.DeviceType,
				LastSeen: wireTime(e.LastSeen), Deadline: wireTime(e.Deadline), At: wireTime(e.At),
				SilentForMs: e.SilentForMs, Repeat: e.Repeat, Degraded: e.Degraded,
				Detail: e.Detail,
			})
			require.NoError(t, err)
			got, err := e.MarshalJSON()
			require.NoError(t, err)
			require.Equal(t, string(want), string(got), "device %q", id)
		}
	}
}

// TestWireTimeMatchesLayout: the hand-written time encoder writes what time.AppendFormat writes for
// timeLayout, for every millisecond pattern and across the years the format can hold.
func TestWireTimeMatchesLayout(t *testing.T) {
	times := []time.Time{
		time.Date(2026, 11, 23, 14, 3, 7, 0, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 1_000_000, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 500_000_000, time.UTC),
		time.Date(2026, 3, 9, 8, 5, 0, 0, time.FixedZone("CET", 3600)),
	}
	for ms := range 1000 {
		times = append(times, time.Date(2026, 2, 28, 23, 59, 59, ms*1_000_000+123_456, time.UTC))
	}
	for _, tt := range times {
		want := `"` + normalizeTime(tt).Format(timeLayout) + `"`
		require.Equal(t, want, string(appendWireTime(nil, tt)), "%v", tt)
	}
	require.Equal(t, "null", string(appendWireTime(nil, time.Time{})))
}

// TestDegradedRoundTrip: "degraded" is written only when true, and a consumer decodes it.
func TestDegradedRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 23, 14, 3, 7, 0, time.UTC)
	e := New(Interrupted, "dev-1", "gateway", at.Add(-time.Second), at.Add(-time.Minute), at, 0)
	b, err := e.MarshalJSON()
	require.NoError(t, err)
	require.NotContains(t, string(b), "degraded")

	e.Degraded = true
	b, err = e.MarshalJSON()
	require.NoError(t, err)
	require.Contains(t, string(b), `,"degraded":true}`)
	got, err := Decode(b)
	require.NoError(t, err)
	require.True(t, got.Degraded)
}
