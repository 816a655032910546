package redisutil

import (
	"fmt"
	"strings"
)

// ReplyReader checks the fields of a script reply as go-redis returns it (Lua numbers as int64, strings
// as string, tables as []any). The first field that is not what the script returns sticks in Err, named
// with Script (its package and name, as errors start).
type ReplyReader struct {
	Script string
	Err    error
}

func (r *ReplyReader) fail(field, format string, args ...any) {
	if r.Err == nil {
		r.Err = fmt.Errorf("%s reply: field %s: %s", r.Script, field, fmt.Sprintf(format, args...))
	}
}

// Fields reads the whole reply: an array of n fields.
func (r *ReplyReader) Fields(v any, n int) []any {
	a, ok := v.([]any)
	switch {
	case !ok:
		r.fail("reply", "want array, got %s", replyType(v))
	case len(a) != n:
		r.fail("reply", "want %d fields, got %d", n, len(a))
	}
	return a
}

// Int reads an integer field.
func (r *ReplyReader) Int(v any, field string) int64 {
	n, ok := v.(int64)
	if !ok {
		r.fail(field, "want int, got %s", replyType(v))
	}
	return n
}

// String reads a string field.
func (r *ReplyReader) String(v any, field string) string {
	s, ok := v.(string)
	if !ok {
		r.fail(field, "want string, got %s", replyType(v))
	}
	return s
}

// Strings reads an array of strings that come in groups of per (pairs, triples).
func (r *ReplyReader) Strings(v any, field string, per int) []string {
	a, ok := v.([]any)
	if !ok {
		r.fail(field, "want array, got %s", replyType(v))
		return nil
	}
	if len(a)%per != 0 {
		r.fail(field, "want groups of %d, got %d elements", per, len(a))
		return nil
	}
	if len(a) == 0 {
		return nil
	}
	out := make([]string, len(a))
	for i, e := range a {
		s, ok := e.(string)
		if !ok {
			r.fail(fmt.Sprintf("%s[%d]", field, i), "want string, got %s", replyType(e))
			return nil
		}
		out[i] = s
	}
	return out
}

// Packed reads a string of sep-separated items that come in groups of per ("" holds none).
func (r *ReplyReader) Packed(v any, field, sep string, per int) []string {
	s := r.String(v, field)
	if s == "" {
		return nil
	}
	items := strings.Split(s, sep)
	if len(items)%per != 0 {
		r.fail(field, "want groups of %d, got %d items", per, len(items))
		return nil
	}
	return items
}

// replyType names the type of a reply value as Lua would: int, string, array, nil.
func replyType(v any) string {
	switch v.(type) {
	case int64:
		return "int"
	case string:
		return "string"
	case []any:
		return "array"
	case nil:
		return "nil"
	default:
		return fmt.Sprintf("%T", v)
	}
}
