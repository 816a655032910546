package matcher

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An operator writes matchers as in amtool; each reads as the API's JSON matcher, and what it selects
// follows its op.
func TestParse(t *testing.T) {
	for in, want := range map[string]Matcher{
		"labels.site=berlin":  {Label: "site", Op: Equal, Value: "berlin"},
		"site=berlin":         {Label: "site", Op: Equal, Value: "berlin"},
		"device_type!=meter":  {Label: "device_type", Op: NotEqual, Value: "meter"},
		"device_id=~m-.*":     {Label: "device_id", Op: Regexp, Value: "m-.*"},
		"parent!~gw-[0-9]+":   {Label: "parent", Op: NotRegexp, Value: "gw-[0-9]+"},
		`labels.room="a = b"`: {Label: "room", Op: Equal, Value: "a = b"},
		"labels.floor=":       {Label: "floor", Op: Equal, Value: ""},
		"labels.note=x!=y=~z": {Label: "note", Op: Equal, Value: "x!=y=~z"},
	} {
		got, err := Parse(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	parsed, err := Parse("labels.site=~ber.*")
	require.NoError(t, err)
	m, err := Compile(parsed)
	require.NoError(t, err)
	assert.True(t, m.Matches("berlin"))
	assert.False(t, m.Matches("paris"), "a regular expression matches the whole value")

	for in, msg := range map[string]string{
		"site":          "want name op value",
		"site!berlin":   `op "!" is not one of`,
		"=berlin":       "a matcher needs a label",
		"site=~ber(lin": "missing closing )",
		`site="berlin`:  "", // an unbalanced quote is part of the value
	} {
		_, err := Parse(in)
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
func TestParseRefusesCostlyExpressions(t *testing.T) {
	_, err := Parse("device_id=~" + strings.Repeat(".{1,1000}", 10))
	require.ErrorIs(t, err, ErrCostly)
	assert.Contains(t, err.Error(), "instructions, at most 1000")
	_, err = Parse("device_id=~(a{1,30}){1,30}")
	require.ErrorIs(t, err, ErrCostly)
	_, err = Parse("device_id=~gw-[0-9]{1,6}|m-.*")
	require.NoError(t, err)
}

// More than MaxMatchers are refused as too costly, whatever they are: a body of thousands of matchers
// costs nothing to refuse.
func TestCheckCostRefusesTooManyMatchers(t *testing.T) {
	ms := make([]Matcher, MaxMatchers+1)
	for i := range ms {
		ms[i] = Matcher{Label: "site", Op: Regexp, Value: "("} // would not compile
	}
	err := CheckCost(ms)
	require.ErrorIs(t, err, ErrCostly)
	assert.Contains(t, err.Error(), "21 matchers, at most 20")
	require.NoError(t, CheckCost(ms[:MaxMatchers]), "a syntax error is Compile's to report")
}
