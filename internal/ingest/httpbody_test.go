package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// signals is what ReadBatch cut body into, as strings.
func signals(t *testing.T, body string, maxSignals int) []string {
	t.Helper()
	b, err := ReadBatch(strings.NewReader(body), maxSignals)
	require.NoError(t, err)
	out := []string{}
	for i := range b.Len() {
		out = append(out, string(b.Signal(i)))
	}
	return out
}

// The framing finds each signal of an NDJSON body or a JSON array, whatever is wrong inside one: a
// broken element spoils only itself, so the signals around it are read.
func TestReadBatchFraming(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"empty", "", []string{}},
		{"white space only", " \n\t\n", []string{}},
		{"ndjson", "{\"device_id\":\"a\"}\n{\"device_id\":\"b\"}\n", []string{`{"device_id":"a"}`, `{"device_id":"b"}`}},
		{"ndjson without final newline, CRLF, blank lines", "{\"a\":1}\r\n\r\n\n  {\"b\":2}", []string{`{"a":1}`, `{"b":2}`}},
		{"ndjson broken line between good ones", "{\"device_id\":\"a\"}\n{\"device_id\":\n{\"device_id\":\"c\"}\n",
			[]string{`{"device_id":"a"}`, `{"device_id":`, `{"device_id":"c"}`}},
		{"array", `[{"device_id":"a"}, {"device_id":"b","x":[1,{"y":"],"}]}]`, []string{`{"device_id":"a"}`, `{"device_id":"b","x":[1,{"y":"],"}]}`}},
		{"empty array", " [ ] ", []string{}},
		{"escaped quote in a string", `[{"device_id":"a\"],"}, {"device_id":"b"}]`, []string{`{"device_id":"a\"],"}`, `{"device_id":"b"}`}},
		{"broken element between good ones", `[{"device_id":"a"}, {"device_id" "b"}, 7, {"device_id":"c"}]`,
			[]string{`{"device_id":"a"}`, `{"device_id" "b"}`, `7`, `{"device_id":"c"}`}},
		{"empty elements are signals (bad ones)", `[{"device_id":"a"},,{"device_id":"b"},]`, []string{`{"device_id":"a"}`, ``, `{"device_id":"b"}`, ``}},
		{"unclosed array keeps whole elements", `[{"device_id":"a"},{"device_id":"b"}`, []string{`{"device_id":"a"}`, `{"device_id":"b"}`}},
		{"unclosed array after a comma", `[{"device_id":"a"},`, []string{`{"device_id":"a"}`}},
		{"garbage after the array is one more signal", `[{"device_id":"a"}] trailing`, []string{`{"device_id":"a"}`, `trailing`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, signals(t, tc.body, MaxBatchSignals))
		})
	}
}

// Every framed signal goes through decode: a good one is a signal, a broken one gets its reason, and an
// element that is not an object is malformed_json rather than an opaque heartbeat.
func TestReadBatchSignalsDecode(t *testing.T) {
	got := signals(t, `[{"device_id":"a"}, {"device_id" "b"}, 7, {"type":"x"}, "", {"device_id":"c"}]`, MaxBatchSignals)
	var reasons []string
	for _, s := range got {
		_, _, reason := Identify(&Message{Source: SourceHTTP, Payload: []byte(s), ObjectOnly: true})
		reasons = append(reasons, reason)
	}
	require.Equal(t, []string{"", ReasonMalformedJSON, ReasonMalformedJSON, ReasonNoDeviceID, ReasonMalformedJSON, ""}, reasons)
}

// A signal longer than MaxPayload keeps just enough to be called oversize, and the next one is read.
func TestReadBatchOversizeSignal(t *testing.T) {
	long := `{"device_id":"a","pad":"` + strings.Repeat("x", 3*MaxPayload) + `"}`
	for _, body := range []string{long + "\n{\"device_id\":\"b\"}\n", "[" + long + `,{"device_id":"b"}]`} {
		got := signals(t, body, MaxBatchSignals)
		require.Len(t, got, 2)
		require.Len(t, got[0], MaxPayload+1)
		_, _, reason := Identify(&Message{Source: SourceHTTP, Payload: []byte(got[0]), ObjectOnly: true})
		require.Equal(t, ReasonOversize, reason)
		require.Equal(t, `{"device_id":"b"}`, got[1])
	}
}

// One signal past the limit refuses the batch, and reading stops there.
func TestReadBatchTooManySignals(t *testing.T) {
	for _, body := range []string{strings.Repeat("{}\n", 4), "[" + strings.Repeat("{},", 3) + "{}]"} {
		require.Len(t, signals(t, body, 4), 4)
		src := strings.NewReader(body + strings.Repeat("{}\n", 1000))
		_, err := ReadBatch(src, 3)
		require.True(t, errors.Is(err, ErrTooManySignals), "%v", err)
	}
	var r bytes.Buffer
	r.WriteString(strings.Repeat("{}\n", 1<<16))
	_, err := ReadBatch(&r, 3)
	require.ErrorIs(t, err, ErrTooManySignals)
	require.Greater(t, r.Len(), 0, "reading stopped at the limit, not at the end of the body")
}

// Whatever the body, the framing never fails on its content, keeps every signal within MaxPayload+1
// bytes, and cuts an array of whole objects, however nested and escaped, into exactly its elements.
func FuzzReadBatch(f *testing.F) {
	for _, seed := range []string{"", "[", "]", `[{"a":"],["}]`, "{\n}\n", `[{"device_id":"a\\"}`, "[[[[", `["\`, "\xff\x00"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		b, err := ReadBatch(strings.NewReader(body), MaxBatchSignals)
		if err != nil {
			require.ErrorIs(t, err, ErrTooManySignals)
			return
		}
		for i := range b.Len() {
			require.LessOrEqual(t, len(b.Signal(i)), MaxPayload+1)
		}
		// The body as one object element of an array, beside a plain one: both come back whole.
		element, err := json.Marshal(map[string]any{"device_id": body, "nested": []any{body, map[string]string{body: body}}})
		require.NoError(t, err)
		got := signals(t, "["+string(element)+` , {"device_id":"b"}]`, MaxBatchSignals)
		require.Equal(t, []string{string(element), `{"device_id":"b"}`}, got)
	})
}
