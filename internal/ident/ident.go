// Package ident is the one rule for the names a device is known by: device ids, parents and type
// names (docs/signals.md#the-payload). Every way a device's name comes in applies it: the MQTT, Kafka and HTTP
// signals (internal/ingest), the registry and its import (internal/daemon), and the configured type names
// (internal/config, TypeProblem).
package ident

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxLen bounds an id or type name, in bytes of UTF-8.
const MaxLen = 256

// Valid reports whether s is a valid id or type name: 1–MaxLen bytes of UTF-8 without control
// characters (Unicode category Cc) or format characters (Cf: bidi controls such as U+202E, zero-width
// characters, U+FEFF), which a terminal, a status page or Alertmanager would show as nothing, or as
// text running the other way, so that one id could pass for another. A Kafka key is checked as bytes,
// before it is copied into a string, and ASCII costs a comparison a byte: the signal path calls it per
// signal.
func Valid[T string | []byte](s T) bool {
	if len(s) == 0 || len(s) > MaxLen {
		return false
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return false
			}
			i++
			continue
		}
		// At most one rune's bytes: converting so few from a []byte allocates nothing.
		r, size := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
		if (r == utf8.RuneError && size == 1) || Invisible(r) {
			return false
		}
		i += size
	}
	return true
}

// Invisible reports whether r is a control (Cc) or format (Cf) character.
func Invisible(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }

// Problem says how s breaks the rule, to follow "device id %q" or "a type name" in an error ("" when
// Valid(s)).
func Problem(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > MaxLen:
		return fmt.Sprintf("is at most %d bytes", MaxLen)
	case !utf8.ValidString(s):
		return "must be UTF-8"
	}
	for _, r := range s {
		switch {
		case unicode.IsControl(r):
			return fmt.Sprintf("must not contain control characters (%U)", r)
		case unicode.Is(unicode.Cf, r):
			return fmt.Sprintf("must not contain invisible format characters (%U; Unicode category Cf: bidi controls, zero-width characters)", r)
		}
	}
	return ""
}

// OwnTimeoutMark joins a type name and a timeout where internal/deadline records a device registered
// with a timeout of its own ("<type>@<timeout>"), so no configured type name may hold it.
const OwnTimeoutMark = "@"

// TypeProblem says how name breaks the rule for type names, to follow "a type name" in an error: an
// id's rule (Problem), and no OwnTimeoutMark; "" when it keeps it.
func TypeProblem(name string) string {
	if p := Problem(name); p != "" {
		return p
	}
	if strings.Contains(name, OwnTimeoutMark) {
		return fmt.Sprintf("must not contain %q (it marks a device's own timeout)", OwnTimeoutMark)
	}
	return ""
}
