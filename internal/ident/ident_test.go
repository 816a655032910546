package ident

import (
	"strings"
	"testing"
)

// An id that a screen would show as another (a right-to-left override, zero-width characters, a BOM)
// is refused, as control characters are; visible text in any script is not.
func TestValid(t *testing.T) {
	good := []string{"meter-1", "zähler-7", "счётчик", "メーター", "a b", "emoji-🙂", strings.Repeat("x", MaxLen)}
	bad := map[string]string{
		"":                            "must not be empty",
		strings.Repeat("x", MaxLen+1): "is at most 256 bytes",
		"bad\xffutf8":                 "must be UTF-8",
		"tab\there":                   "control characters (U+0009)",
		"del\x7f":                     "control characters (U+007F)",
		"c1\u0085":                    "control characters (U+0085)",
		"meter-1\u202egpj.exe":        "format characters (U+202E",
		"rlo\u202d":                   "format characters (U+202D",
		"isolate\u2066x\u2069":        "format characters (U+2066",
		"zero\u200bwidth":             "format characters (U+200B",
		"zwj\u200d":                   "format characters (U+200D",
		"\ufeffbom":                   "format characters (U+FEFF",
		"soft\u00adhyphen":            "format characters (U+00AD",
		"tag\U000E0041":               "format characters (U+E0041",
		"lrm\u200e":                   "format characters (U+200E",
	}
	for _, s := range good {
		if !Valid(s) || !Valid([]byte(s)) || Problem(s) != "" {
			t.Errorf("%q: refused (%s)", s, Problem(s))
		}
	}
	for s, want := range bad {
		if Valid(s) || Valid([]byte(s)) {
			t.Errorf("%q: accepted", s)
		}
		if got := Problem(s); !strings.Contains(got, want) {
			t.Errorf("Problem(%q) = %q, want it to say %q", s, got, want)
		}
	}
}

func BenchmarkValidASCII(b *testing.B) {
	id := []byte("meter-000123456")
	for b.Loop() {
		if !Valid(id) {
			b.Fatal("refused")
		}
	}
}

// A type name keeps an id's rule and holds no "@", which marks a device's own timeout in the name its
// deadline is recorded under.
func TestTypeProblem(t *testing.T) {
	for name, want := range map[string]string{"meter": "", "zähler": "", "meter@5m": `must not contain "@"`, "": "must not be empty",
		"bad\x00": "control characters"} {
		if got := TypeProblem(name); (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("TypeProblem(%q) = %q, want %q", name, got, want)
		}
	}
}
