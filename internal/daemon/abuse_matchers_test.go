package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A silence's matchers are evaluated for every claim and every listed device, so what one may cost is
// bounded (issue 58, 4): a regular expression compiling to a huge program (1 KiB of counted repetitions
// compiles to hundreds of thousands of instructions) or too many matchers is refused with a 400 that
// says why, and counted; ordinary ones, and a long alternation of ids, are taken.
func TestCostlyMatchersAreRefused(t *testing.T) {
	f := newAPIFixtureWith(t, func(o *APIOptions) { o.MaxBodySize = 1 << 20 }, "")
	silence := func(matchers ...map[string]string) string {
		b, err := json.Marshal(map[string]any{"for": "1h", "matchers": matchers})
		require.NoError(t, err)
		return string(b)
	}
	m := func(label, op, value string) map[string]string {
		return map[string]string{"label": label, "op": op, "value": value}
	}

	huge := strings.Repeat(".{1,1000}", 100) // 900 bytes, about 200 000 instructions
	nested := "(a{1,30}){1,30}"              // 15 bytes, about 1 900
	for _, c := range []struct {
		body, says string
	}{
		{silence(m("device_id", "=~", huge)), "instructions, at most 1000"},
		{silence(m("site", "=", "berlin"), m("parent", "!~", nested)), "instructions, at most 1000"},
		{silence(m("site", "=", "berlin"), m("device_id", "=~", "(x{1,1000}){1,1000}")), "invalid repeat count"}, // Go refuses it itself
	} {
		code, out := f.call(t, "POST", "/v1/silences", "", c.body)
		require.Equal(t, http.StatusBadRequest, code, "%.100s: %v", c.body, out)
		assert.Contains(t, out["error"], c.says)
	}
	many := make([]map[string]string, 21)
	for i := range many {
		many[i] = m(fmt.Sprintf("l%d", i), "=", "x")
	}
	code, out := f.call(t, "POST", "/v1/silences", "", silence(many...))
	require.Equal(t, http.StatusBadRequest, code, "%v", out)
	assert.Contains(t, out["error"], "21 matchers, at most 20")
	// Thousands of matchers are refused for their number before any is compiled.
	lots := make([]map[string]string, 5000)
	for i := range lots {
		lots[i] = m("device_id", "=~", nested)
	}
	code, out = f.call(t, "POST", "/v1/silences", "", silence(lots...))
	require.Equal(t, http.StatusBadRequest, code, "%v", out)
	assert.Contains(t, out["error"], "5000 matchers, at most 20")
	assert.Equal(t, 4, badInputCount(t, f, "matcher"), "the costly ones are counted (Go's own refusal is a plain bad request)")

	var ids []string
	for i := 0; len(strings.Join(ids, "|")) < 1000; i++ {
		ids = append(ids, fmt.Sprintf("gw-%04d", i*37))
	}
	for _, body := range []string{
		silence(m("device_id", "=~", "m-.*"), m("site", "!~", "ber(lin)?|paris"), m("parent", "=~", `gw-[0-9]{1,6}`)),
		silence(m("device_id", "=~", strings.Join(ids[:len(ids)-1], "|"))),
	} {
		code, out := f.call(t, "POST", "/v1/silences", "", body)
		require.Equal(t, http.StatusCreated, code, "%.100s: %v", body, out)
	}
	assert.Equal(t, 4, badInputCount(t, f, "matcher"))
}
