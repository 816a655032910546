package deadline

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// luaPattern is the Go regexp of one of the scripts' state patterns, which use only %d of Lua's classes.
func luaPattern(p string) *regexp.Regexp {
	return regexp.MustCompile(strings.ReplaceAll(p, "%d", "[0-9]"))
}

// The scripts' patterns and formats are derived from the field order; Encode and DecodeState must read
// what they write and write what they read.
func TestStateLuaPatternsAgreeWithEncode(t *testing.T) {
	st := State{Deadline: 1_763_800_031_000, TypeIndex: 7, Next: 2, InterruptedAt: 1_763_800_031_005, Failures: 1, Reason: "kafka: a:b"}
	enc := st.Encode()

	require.Equal(t, []string{enc[:strings.Index(enc, ":")+1], "1763800031000"}, luaPattern(stateDeadlinePattern).FindStringSubmatch(enc))
	require.Equal(t, "7", luaPattern(stateTypePattern).FindStringSubmatch(enc)[1])

	require.False(t, luaPattern(stateAckedPattern).MatchString(enc))
	setAcked := luaPattern(stateUnackedPattern).ReplaceAllString(enc, strings.ReplaceAll(stateSetAcked, "%1", "${1}"))
	acked := st
	acked.Acked = true
	require.Equal(t, acked.Encode(), setAcked, "the gsub sets the acked flag and nothing else")
	require.True(t, luaPattern(stateAckedPattern).MatchString(setAcked))
	exhausted := st
	exhausted.Exhausted = true
	require.False(t, luaPattern(stateAckedPattern).MatchString(exhausted.Encode()), "the exhausted flag is not the acked one")
}

func TestStateLuaFormatsDecode(t *testing.T) {
	const dl, typ = int64(1_763_800_031_000), 7
	// Go's %.0f and %d print an integral float and an int as Lua's string.format does.
	open, err := DecodeState(fmt.Sprintf(stateOpenFormat, float64(dl), typ))
	require.NoError(t, err)
	require.Equal(t, State{Deadline: dl, TypeIndex: typ}, open, "a fresh incident, nothing sent")

	committed, err := DecodeState(fmt.Sprintf(stateCommittedFormat, float64(dl), typ, float64(dl)))
	require.NoError(t, err)
	bare, err := DecodeState(strconv.FormatInt(dl*MaxTypes+typ, 10))
	require.NoError(t, err)
	require.Equal(t, bare, committed, "the full form of a committed incident reads as its bare score")
}

func TestLuaString(t *testing.T) {
	require.Equal(t, `'\000hashtable'`, luaString(StateGuardField))
	require.Equal(t, `'([^\n]+)\n'`, luaString("([^\n]+)\n"))
	require.Equal(t, `'it\'s \\ %d'`, luaString(`it's \ %d`))
}
