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

// The scripts' patterns and formats are derived from the field order; Encode and decodeState must read
// what they write and write what they read.
func TestStateLuaPatternsAgreeWithEncode(t *testing.T) {
	st := State{Deadline: 1_763_800_031_000, TypeIndex: 7, Next: 2, InterruptedAt: 1_763_800_031_005, Failures: 1, Reason: "kafka: a:b"}
	enc := st.encode()

	require.Equal(t, []string{enc[:strings.Index(enc, ":")+1], "1763800031000"}, luaPattern(stateDeadlinePattern).FindStringSubmatch(enc))
	require.Equal(t, "7", luaPattern(stateTypePattern).FindStringSubmatch(enc)[1])

	require.False(t, luaPattern(stateAckedPattern).MatchString(enc))
	setAcked := luaPattern(stateUnackedPattern).ReplaceAllString(enc, strings.ReplaceAll(stateSetAcked, "%1", "${1}"))
	acked := st
	acked.Acked = true
	require.Equal(t, acked.encode(), setAcked, "the gsub sets the acked flag and nothing else")
	require.True(t, luaPattern(stateAckedPattern).MatchString(setAcked))
	exhausted := st
	exhausted.Exhausted = true
	require.False(t, luaPattern(stateAckedPattern).MatchString(exhausted.encode()), "the exhausted flag is not the acked one")
}

func TestStateLuaFormatsDecode(t *testing.T) {
	const dl, typ = int64(1_763_800_031_000), 7
	// Go's %.0f and %d print an integral float and an int as Lua's string.format does.
	open, err := decodeState(fmt.Sprintf(stateReplacingFormat, float64(dl), typ, "0", "0"))
	require.NoError(t, err)
	require.Equal(t, State{Deadline: dl, TypeIndex: typ}, open, "a fresh incident, nothing sent")

	committed, err := decodeState(fmt.Sprintf(stateCommittedFormat, float64(dl), typ, float64(dl)))
	require.NoError(t, err)
	bare, err := decodeState(strconv.FormatInt(dl*MaxTypes+typ, 10))
	require.NoError(t, err)
	require.Equal(t, bare, committed, "the full form of a committed incident reads as its bare score")
}

func TestStateSuppressedFormsMatchTheStatesAlarmWrites(t *testing.T) {
	const dl, typ, at = int64(1_763_800_031_000), 7, int64(1_763_800_033_000)
	waiting := State{Deadline: dl, TypeIndex: typ}
	// The wake appends the tail to the waiting state's deadline and type (wake.go).
	prefix := strings.Join(strings.SplitN(waiting.encode(), stateSep, 3)[:2], stateSep)
	committed := prefix + stateSep + fmt.Sprintf(stateSuppressedTail, float64(at))
	suppressed := State{Deadline: dl, TypeIndex: typ, Next: 1, Hold: HoldParent, InterruptedAt: at}
	require.Equal(t, suppressed.encode(), committed, "a wake commits `suppressed` as the alarm loop acknowledges it")
	require.True(t, luaPattern(stateSuppressedPattern).MatchString(committed))
	acked := suppressed
	acked.Acked = true
	require.False(t, luaPattern(stateSuppressedPattern).MatchString(acked.encode()), "an operator's ack is another state")

	require.True(t, luaPattern(stateWaitingPattern).MatchString(waiting.encode()), "a child waiting for its parent's verdict")
	for _, st := range []State{suppressed, {Deadline: dl, TypeIndex: typ, Hold: HoldGroup}, {Deadline: dl, TypeIndex: typ, Acked: true}} {
		require.False(t, luaPattern(stateWaitingPattern).MatchString(st.encode()), "%+v is not waiting", st)
	}
}

func TestLuaString(t *testing.T) {
	require.Equal(t, `'\000hashtable'`, luaString(stateGuardField))
	require.Equal(t, `'([^\n]+)\n'`, luaString("([^\n]+)\n"))
	require.Equal(t, `'it\'s \\ %d'`, luaString(`it's \ %d`))
}

func TestDecodeStateReadsFullAndClaimForms(t *testing.T) {
	full := State{Deadline: 1_763_800_031_000, TypeIndex: 2, Next: 3, Acked: true, InterruptedAt: 1_763_800_031_005, Failures: 1, Reason: "kafka: a:b"}
	got, err := decodeState(full.encode())
	require.NoError(t, err)
	require.Equal(t, full, got)
	for _, hold := range []Hold{HoldNone, HoldParent, HoldAfterParent} {
		held := State{Deadline: 1_763_800_031_000, Next: 1, Hold: hold, InterruptedAt: 1_763_800_031_005}
		got, err := decodeState(held.encode())
		require.NoError(t, err)
		require.Equal(t, held, got)
	}
	exhausted := State{Deadline: 1_763_800_031_000, Next: 4, Exhausted: true}
	got, err = decodeState(exhausted.encode())
	require.NoError(t, err)
	require.Equal(t, exhausted, got)
	got, err = decodeState(fmt.Sprint(1_763_800_031_000*MaxTypes + 2))
	require.NoError(t, err)
	require.Equal(t, State{Deadline: 1_763_800_031_000, TypeIndex: 2, Next: 1, InterruptedAt: 1_763_800_031_000}, got,
		"a committed incident: interrupted sent, repeats timed from the deadline")
	for _, bad := range []string{"", "x", "-5", "1:2"} {
		_, err := decodeState(bad)
		require.Error(t, err, "%q", bad)
	}
}

// An incident stored before the owed fields existed (a rolling upgrade) still decodes, its failure
// reason, colons and all, intact.
func TestStateDecodesTheLayoutBeforeOwedFields(t *testing.T) {
	st, err := decodeState("1763800031000:7:2:0:0:1763800031500:3:kafka: broker unreachable")
	require.NoError(t, err)
	require.Equal(t, State{Deadline: 1763800031000, TypeIndex: 7, Next: 2, InterruptedAt: 1763800031500, Failures: 3,
		Reason: "kafka: broker unreachable"}, st)
	owing := State{Deadline: 5, TypeIndex: 1, Owed: 3, OwedWarned: true, Reason: "a: b"}
	back, err := decodeState(owing.encode())
	require.NoError(t, err)
	require.Equal(t, owing, back)
}
