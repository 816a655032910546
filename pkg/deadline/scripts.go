package deadline

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts spell none of the constants they share with Go. A script's source names each one as
// ${Name}, Name being the Go identifier that defines it, and newScript replaces it with that value, as a
// Lua literal (a number or a quoted string), once at package init.
var scriptConstants = strings.NewReplacer(
	// Scores: deadline_ms × MaxTypes + type index; a dormant alarm entry is scored from DormantAfter up.
	"${MaxTypes}", strconv.Itoa(MaxTypes),
	"${DormantAfter}", strconv.Itoa(DormantAfter),
	"${DefaultType}", luaString(DefaultType),
	// State hashes and encoded states (state.go).
	"${StateGuardField}", luaString(StateGuardField),
	"${stateGuardValue}", luaString(stateGuardValue),
	"${stateSep}", luaString(stateSep),
	"${stateSepByte}", strconv.Itoa(int(stateSep[0])),
	"${stateDeadlinePattern}", luaString(stateDeadlinePattern),
	"${stateTypePattern}", luaString(stateTypePattern),
	"${stateAckedPattern}", luaString(stateAckedPattern),
	"${stateUnackedPattern}", luaString(stateUnackedPattern),
	"${stateSetAcked}", luaString(stateSetAcked),
	"${stateOpenFormat}", luaString(stateOpenFormat),
	"${stateCommittedFormat}", luaString(stateCommittedFormat),
	// In-flight records and the lists packed into one argument or reply element.
	"${recordMarkByte}", strconv.Itoa(int(recordMark[0])),
	"${packSep}", luaString(packSep),
	"${packedItem}", luaString("[^"+packSep+"]+"),
	"${packedPair}", luaString("([^"+packSep+"]+)"+packSep+"([^"+packSep+"]+)"),
	"${listItem}", luaString("[^"+listSep+"]+"),
)

// packSep separates the items of a list packed into one script argument or reply element (device ids
// hold no control characters, SPEC §4); listSep the values of a per-type table (typeTable.render).
const (
	packSep = "\n"
	listSep = ","
)

// newScript is redis.NewScript of src with the shared constants filled in. A name it does not know is a
// programming error, so it panics at package init rather than fail in Redis at the first call.
func newScript(src string) *redis.Script {
	s := scriptConstants.Replace(src)
	if i := strings.Index(s, "${"); i >= 0 {
		end := strings.IndexByte(s[i:], '}')
		panic(fmt.Sprintf("deadline: script constant %s is not defined", s[i:i+max(end+1, 2)]))
	}
	return redis.NewScript(s)
}

// luaString quotes s as a Lua string literal; bytes outside printable ASCII become decimal escapes.
func luaString(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\'' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < ' ' || c > '~':
			fmt.Fprintf(&b, `\%03d`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}
