package silence

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An operator writes matchers as in amtool; each reads as the API's JSON matcher, and what it selects
// follows its op.
func TestParseMatcher(t *testing.T) {
	for in, want := range map[string]Matcher{
		"labels.site=berlin":  {Label: "site", Op: opEqual, Value: "berlin"},
		"site=berlin":         {Label: "site", Op: opEqual, Value: "berlin"},
		"device_type!=meter":  {Label: "device_type", Op: opNotEqual, Value: "meter"},
		"device_id=~m-.*":     {Label: "device_id", Op: opRegexp, Value: "m-.*"},
		"parent!~gw-[0-9]+":   {Label: "parent", Op: opNotRegexp, Value: "gw-[0-9]+"},
		`labels.room="a = b"`: {Label: "room", Op: opEqual, Value: "a = b"},
		"labels.floor=":       {Label: "floor", Op: opEqual, Value: ""},
		"labels.note=x!=y=~z": {Label: "note", Op: opEqual, Value: "x!=y=~z"},
	} {
		got, err := ParseMatcher(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	parsed, err := ParseMatcher("labels.site=~ber.*")
	require.NoError(t, err)
	m := matcher{Matcher: parsed}
	require.NoError(t, m.compile())
	assert.True(t, m.matchesValue("berlin"))
	assert.False(t, m.matchesValue("paris"), "a regular expression matches the whole value")

	for in, msg := range map[string]string{
		"site":          "want name op value",
		"site!berlin":   `op "!" is not one of`,
		"=berlin":       "a matcher needs a label",
		"site=~ber(lin": "missing closing )",
		`site="berlin`:  "", // an unbalanced quote is part of the value
	} {
		_, err := ParseMatcher(in)
		if msg == "" {
			assert.NoError(t, err, in)
			continue
		}
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), msg, in)
	}
}

// A matcher whose regular expression compiles to more than maxProgram instructions is refused, as the
// API refuses it, so `heartbeatd ctl silence` says so before it asks.
func TestParseMatcherRefusesCostlyExpressions(t *testing.T) {
	_, err := ParseMatcher("device_id=~" + strings.Repeat(".{1,1000}", 10))
	require.ErrorIs(t, err, ErrCostly)
	assert.Contains(t, err.Error(), "instructions, at most 1000")
	_, err = ParseMatcher("device_id=~(a{1,30}){1,30}")
	require.ErrorIs(t, err, ErrCostly)
	_, err = ParseMatcher("device_id=~gw-[0-9]{1,6}|m-.*")
	require.NoError(t, err)
}
