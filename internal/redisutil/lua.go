package redisutil

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// NewScript is redis.NewScript of src with its ${Name} constants replaced by constants, for packages
// whose scripts spell none of the values they share with Go (values as Lua literals: LuaString). A name
// constants does not know is a programming error, so it panics at package init rather than fail in Redis
// at the first call.
func NewScript(constants *strings.Replacer, src string) *redis.Script {
	s := constants.Replace(src)
	if i := strings.Index(s, "${"); i >= 0 {
		end := strings.IndexByte(s[i:], '}')
		panic(fmt.Sprintf("redisutil: script constant %s is not defined", s[i:i+max(end+1, 2)]))
	}
	return redis.NewScript(s)
}

// LuaString quotes s as a Lua string literal; bytes outside printable ASCII become decimal escapes.
func LuaString(s string) string {
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
