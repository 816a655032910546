// Package matcher is how a silence's matchers select devices, in Alertmanager's manner
// (docs/schedules.md#recurring-silences): the syntax an operator writes (`labels.site=~ber.*`), the checks
// a matcher must pass, and the bounds on what matchers may cost, since every claim evaluates them. The
// server's silences (internal/silence) and `heartbeatd ctl` (internal/ctl) both use it, so ctl refuses
// what the server would before it asks.
package matcher

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/heartbeatd/heartbeatd/pkg/client"
)

// Matcher selects devices by a label, device_id, device_type or parent, in the API's wire shape
// (client.Matcher has the rules).
type Matcher = client.Matcher

// The ops, as Alertmanager writes them.
const (
	Equal     = "="
	NotEqual  = "!="
	Regexp    = "=~"
	NotRegexp = "!~"
)

// MaxMatchers bounds one silence's matchers: every claim checks them.
const MaxMatchers = 20

// maxProgram bounds a matcher's regular expression, in instructions of its compiled program: matching
// costs up to instructions × the value's length, for every claim and every listed device. Ordinary
// expressions take tens (`gw-[0-9]+` 9, `[a-z]{2}-[0-9]{1,6}` 18); an alternation of ids up to one a
// byte (a few hundred for a full value of ids sharing a prefix; about 1000 for ids with nothing in
// common, which may be refused short of the value's 1024 bytes); counted repetitions thousands to
// hundreds of thousands
// (`(a{1,30}){1,30}` about 1900, `.{1,1000}` repeated over 1 KiB about 226 000).
const maxProgram = 1000

// The bounds of a matcher's label and value, in bytes.
const (
	maxLabel = 256
	maxValue = 1024
)

// ErrCostly is wrapped by CheckCost and Parse for matchers too costly to evaluate on every claim: more
// than MaxMatchers, or an expression of more than maxProgram instructions.
var ErrCostly = errors.New("too costly")

// CheckCost refuses matchers too costly to evaluate: too many, or a regular expression compiling to a
// program of more than maxProgram instructions. The count is checked first, so a body of thousands of
// matchers compiles none of them.
func CheckCost(ms []Matcher) error {
	if len(ms) > MaxMatchers {
		return fmt.Errorf("%w: %d matchers, at most %d", ErrCostly, len(ms), MaxMatchers)
	}
	for _, m := range ms {
		if m.Op != Regexp && m.Op != NotRegexp {
			continue
		}
		n, err := programSize(m.Value)
		if err != nil {
			continue // Compile names the syntax error
		}
		if n > maxProgram {
			return fmt.Errorf("%w: matcher %s%s%s: its regular expression compiles to %d instructions, at most %d; "+
				"write it with fewer or smaller counted repetitions ({n,m}), or split it over several silences",
				ErrCostly, m.Label, m.Op, shorten(m.Value), n, maxProgram)
		}
	}
	return nil
}

// programSize is the number of instructions expr compiles to, anchored as a matcher's, as regexp.Compile
// would compile it (Perl syntax, simplified).
func programSize(expr string) (int, error) {
	re, err := syntax.Parse(anchored(expr), syntax.Perl)
	if err != nil {
		return 0, err
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0, err
	}
	return len(prog.Inst), nil
}

// anchored makes expr match a whole value, as in Alertmanager.
func anchored(expr string) string { return "^(?:" + expr + ")$" }

// shorten quotes a matcher's value for an error, cut after 64 bytes.
func shorten(v string) string {
	const keep = 64
	if len(v) <= keep {
		return strconv.Quote(v)
	}
	cut := keep
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return strconv.Quote(v[:cut]) + fmt.Sprintf("… (%d bytes)", len(v))
}

// Compiled is a Matcher checked and ready to apply.
type Compiled struct {
	Matcher
	re *regexp.Regexp // for =~ and !~: the anchored expression
}

// Compile checks m (a label, bounded sizes, a known op, a valid expression) and prepares its regular
// expression. It does not bound the expression's cost: CheckCost does, for new silences only.
func Compile(m Matcher) (Compiled, error) {
	switch {
	case m.Label == "":
		return Compiled{}, fmt.Errorf("a matcher needs a label (a label name, or device_id, device_type, parent)")
	case len(m.Label) > maxLabel || len(m.Value) > maxValue:
		return Compiled{}, fmt.Errorf("matcher %q: label at most %d bytes, value at most %d", m.Label, maxLabel, maxValue)
	}
	c := Compiled{Matcher: m}
	switch m.Op {
	case Equal, NotEqual:
	case Regexp, NotRegexp:
		re, err := regexp.Compile(anchored(m.Value))
		if err != nil {
			return Compiled{}, fmt.Errorf("matcher %s%s%q: %v", m.Label, m.Op, m.Value, err)
		}
		c.re = re
	default:
		return Compiled{}, fmt.Errorf("matcher %q: op %q is not one of =, !=, =~, !~", m.Label, m.Op)
	}
	return c, nil
}

// Matches applies the matcher to one value (a device without the label has the empty value).
func (c *Compiled) Matches(v string) bool {
	switch c.Op {
	case Equal:
		return v == c.Value
	case NotEqual:
		return v != c.Value
	case Regexp:
		return c.re.MatchString(v)
	default:
		return !c.re.MatchString(v)
	}
}

// NeedsFacts reports whether the matcher looks at more than a claim carries (its device and type): a
// label or the parent.
func (c *Compiled) NeedsFacts() bool { return c.Label != "device_id" && c.Label != "device_type" }

// Describe writes matchers as an operator reads them: `site=~"ber.*", parent!="core-1"`.
func Describe(ms []Matcher) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("%s%s%q", m.Label, m.Op, m.Value)
	}
	return strings.Join(parts, ", ")
}

// Parse reads a matcher as an operator writes it, `name op value` in Alertmanager's manner:
// `labels.site=berlin` or `site=berlin` (a registered label), `device_type!=meter`, `device_id=~m-.*`,
// `parent!~gw-[0-9]+`; the value may be double-quoted (`site="ber lin"`). It checks it as the server's
// silences do (Compile and CheckCost).
func Parse(s string) (Matcher, error) {
	i := strings.IndexAny(s, "=!")
	if i < 0 {
		return Matcher{}, fmt.Errorf("matcher %q: want name op value, op one of =, !=, =~, !~", s)
	}
	m := Matcher{Label: strings.TrimSpace(s[:i]), Op: Equal}
	rest := s[i:]
	for _, op := range []string{NotEqual, Regexp, NotRegexp, Equal} { // two-character ops first
		if strings.HasPrefix(rest, op) {
			m.Op, rest = op, rest[len(op):]
			break
		}
	}
	if rest == s[i:] {
		return Matcher{}, fmt.Errorf("matcher %q: op %q is not one of =, !=, =~, !~", s, rest[:1])
	}
	if label, ok := strings.CutPrefix(m.Label, "labels."); ok {
		m.Label = label
	}
	m.Value = strings.TrimSpace(rest)
	if len(m.Value) >= 2 && m.Value[0] == '"' && m.Value[len(m.Value)-1] == '"' {
		v, err := strconv.Unquote(m.Value)
		if err != nil {
			return Matcher{}, fmt.Errorf("matcher %q: %v", s, err)
		}
		m.Value = v
	}
	if err := CheckCost([]Matcher{m}); err != nil {
		return Matcher{}, err
	}
	if _, err := Compile(m); err != nil {
		return Matcher{}, err
	}
	return m, nil
}
