package silence

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/heartbeatd/heartbeatd/pkg/client"
	"github.com/heartbeatd/heartbeatd/pkg/schedule"
)

// Matcher selects devices by a label, device_id, device_type or parent (client.Matcher has the rules).
type Matcher = client.Matcher

// matcher is a Matcher checked and ready to apply: re is its anchored regular expression for =~ and !~.
type matcher struct {
	Matcher
	re *regexp.Regexp
}

// The matcher ops.
const (
	opEqual     = "="
	opNotEqual  = "!="
	opRegexp    = "=~"
	opNotRegexp = "!~"
)

// maxMatchers bounds one silence's matchers: every claim checks them.
const maxMatchers = 20

// maxProgram bounds a matcher's regular expression, in instructions of its compiled program: matching
// costs up to instructions × the value's length, for every claim and every listed device. Ordinary
// expressions take tens (`gw-[0-9]+` 9, `[a-z]{2}-[0-9]{1,6}` 18); an alternation of ids filling the
// value's 1024 bytes a few hundred; counted repetitions thousands to hundreds of thousands
// (`(a{1,30}){1,30}` about 1900, `.{1,1000}` repeated over 1 KiB about 226 000).
const maxProgram = 1000

// ErrCostly is wrapped, beside ErrInvalid, by Create and ParseMatcher for matchers too costly to
// evaluate on every claim: more than maxMatchers, or an expression of more than maxProgram instructions.
var ErrCostly = errors.New("too costly")

// checkCost refuses matchers too costly to evaluate: too many, or a regular expression compiling to a
// program of more than maxProgram instructions. The count is checked first, so a body of thousands of
// matchers compiles none of them.
func checkCost(ms []Matcher) error {
	if len(ms) > maxMatchers {
		return fmt.Errorf("%w: %d matchers, at most %d", ErrCostly, len(ms), maxMatchers)
	}
	for _, m := range ms {
		if m.Op != opRegexp && m.Op != opNotRegexp {
			continue
		}
		n, err := programSize(m.Value)
		if err != nil {
			continue // compile names the syntax error
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
	re, err := syntax.Parse("^(?:"+expr+")$", syntax.Perl)
	if err != nil {
		return 0, err
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0, err
	}
	return len(prog.Inst), nil
}

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

// compile checks m and prepares its regular expression.
func (m *matcher) compile() error {
	switch {
	case m.Label == "":
		return fmt.Errorf("a matcher needs a label (a label name, or device_id, device_type, parent)")
	case len(m.Label) > 256 || len(m.Value) > 1024:
		return fmt.Errorf("matcher %q: label at most 256 bytes, value at most 1024", m.Label)
	}
	switch m.Op {
	case opEqual, opNotEqual:
	case opRegexp, opNotRegexp:
		re, err := regexp.Compile("^(?:" + m.Value + ")$")
		if err != nil {
			return fmt.Errorf("matcher %s%s%q: %v", m.Label, m.Op, m.Value, err)
		}
		m.re = re
	default:
		return fmt.Errorf("matcher %q: op %q is not one of =, !=, =~, !~", m.Label, m.Op)
	}
	return nil
}

// matchesValue applies m to one value.
func (m *matcher) matchesValue(v string) bool {
	switch m.Op {
	case opEqual:
		return v == m.Value
	case opNotEqual:
		return v != m.Value
	case opRegexp:
		return m.re.MatchString(v)
	default:
		return !m.re.MatchString(v)
	}
}

// needsFacts reports whether m looks at more than a claim carries (its device and type).
func (m *matcher) needsFacts() bool { return m.Label != "device_id" && m.Label != "device_type" }

// Facts are what matchers look at of one device.
type Facts struct {
	DeviceID   string
	DeviceType string
	Parent     string
	Labels     map[string]string
}

func (f Facts) value(label string) string {
	switch label {
	case "device_id":
		return f.DeviceID
	case "device_type":
		return f.DeviceType
	case "parent":
		return f.Parent
	}
	return f.Labels[label]
}

// compiled is a stored silence ready to be checked: its matchers compiled, its intervals resolved.
type compiled struct {
	Silence
	matchers []matcher
	calendar *schedule.Calendar // nil: active from Starts to Ends without a break
	unknown  bool               // names an interval the configuration no longer defines: never active
	// intervals are what its names resolved to (nil where one did not): the index reuses the compiled
	// silence while they and the silence stay the same, instead of compiling its expressions every refresh.
	intervals []*schedule.Interval
	err       error
}

// resolve looks up names; nil where a name is not defined.
func resolve(names []string, intervals func(string) *schedule.Interval) []*schedule.Interval {
	if len(names) == 0 {
		return nil
	}
	out := make([]*schedule.Interval, len(names))
	for i, n := range names {
		if intervals != nil {
			out[i] = intervals(n)
		}
	}
	return out
}

// recompile is compile, or prev when it was compiled from the same silence and the same intervals.
func recompile(prev *compiled, sil Silence, intervals func(string) *schedule.Interval) (compiled, error) {
	if prev != nil && reflect.DeepEqual(prev.Silence, sil) && slices.Equal(prev.intervals, resolve(sil.TimeIntervals, intervals)) {
		return *prev, prev.err
	}
	return compile(sil, intervals)
}

// compile prepares sil; intervals resolves interval names (nil: none are defined).
func compile(sil Silence, intervals func(string) *schedule.Interval) (c compiled, err error) {
	c = compiled{Silence: sil, matchers: make([]matcher, len(sil.Matchers)), intervals: resolve(sil.TimeIntervals, intervals)}
	defer func() { c.err = err }()
	for i, m := range sil.Matchers {
		c.matchers[i] = matcher{Matcher: m}
	}
	for i := range c.matchers {
		if err := c.matchers[i].compile(); err != nil {
			return c, err
		}
	}
	for i, iv := range c.intervals {
		if iv == nil {
			c.unknown = true
			return c, fmt.Errorf("time_intervals: %q is not in the configuration's time_intervals", sil.TimeIntervals[i])
		}
	}
	if len(c.intervals) > 0 {
		c.calendar = schedule.NewCalendar(c.intervals, nil)
	}
	return c, nil
}

// matches reports whether the silence selects the device (its device, type and matchers, not its time).
func (c *compiled) matches(f Facts) bool {
	if c.DeviceID != "" && c.DeviceID != f.DeviceID {
		return false
	}
	if c.DeviceType != "" && c.DeviceType != f.DeviceType {
		return false
	}
	for i := range c.matchers {
		if !c.matchers[i].matchesValue(f.value(c.matchers[i].Label)) {
			return false
		}
	}
	return true
}

// activeUntil is when the silence stops covering now: its end, or for a recurring one the end of the
// current spell of its intervals; zero when it does not cover now.
func (c *compiled) activeUntil(now time.Time) time.Time {
	if c.unknown || c.Starts.After(now) || !c.Ends.After(now) {
		return time.Time{}
	}
	if c.calendar == nil {
		return c.Ends
	}
	until, inside := c.calendar.QuietUntil(now)
	if !inside {
		return time.Time{}
	}
	if until.After(c.Ends) {
		return c.Ends
	}
	return until
}

// validateSelection checks what a silence selects: a device, a type, matchers, or a combination, never
// everything.
func validateSelection(sil Silence, c compiled) error {
	switch {
	case sil.DeviceID != "" && sil.DeviceType != "":
		return fmt.Errorf("give device_id or device_type, not both (a matcher can narrow a type)")
	case sil.DeviceID == "" && sil.DeviceType == "" && len(sil.Matchers) == 0:
		return fmt.Errorf("give device_id, device_type or matchers")
	case len(sil.Matchers) > maxMatchers:
		return fmt.Errorf("at most %d matchers", maxMatchers)
	case len(sil.TimeIntervals) > maxMatchers:
		return fmt.Errorf("at most %d time_intervals", maxMatchers)
	}
	if sil.DeviceID == "" && sil.DeviceType == "" &&
		!slices.ContainsFunc(c.matchers, func(m matcher) bool { return !m.matchesValue("") }) {
		// As in Alertmanager: a silence of matchers that all match the empty value would silence the fleet.
		return fmt.Errorf("at least one matcher must not match the empty value (%s)", describe(sil.Matchers))
	}
	return nil
}

func describe(ms []Matcher) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("%s%s%q", m.Label, m.Op, m.Value)
	}
	return strings.Join(parts, ", ")
}

// ParseMatcher reads a matcher as an operator writes it, `name op value` in Alertmanager's manner:
// `labels.site=berlin` or `site=berlin` (a registered label), `device_type!=meter`, `device_id=~m-.*`,
// `parent!~gw-[0-9]+`; the value may be double-quoted (`site="ber lin"`). It checks it as Create would.
func ParseMatcher(s string) (Matcher, error) {
	i := strings.IndexAny(s, "=!")
	if i < 0 {
		return Matcher{}, fmt.Errorf("matcher %q: want name op value, op one of =, !=, =~, !~", s)
	}
	m := Matcher{Label: strings.TrimSpace(s[:i]), Op: opEqual}
	rest := s[i:]
	for _, op := range []string{opNotEqual, opRegexp, opNotRegexp, opEqual} { // two-character ops first
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
	if err := checkCost([]Matcher{m}); err != nil {
		return Matcher{}, err
	}
	check := matcher{Matcher: m}
	if err := check.compile(); err != nil {
		return Matcher{}, err
	}
	return m, nil
}

// Selector is matchers as an operator writes them, checked and compiled, for whoever selects devices in
// the silences' syntax (the notifier's routes).
type Selector struct{ matchers []matcher }

// NewSelector parses each text with ParseMatcher; all of them must match. No texts select everything.
func NewSelector(texts []string) (Selector, error) {
	if len(texts) > maxMatchers {
		return Selector{}, fmt.Errorf("%w: %d matchers, at most %d", ErrCostly, len(texts), maxMatchers)
	}
	s := Selector{matchers: make([]matcher, len(texts))}
	for i, text := range texts {
		m, err := ParseMatcher(text)
		if err != nil {
			return Selector{}, err
		}
		s.matchers[i] = matcher{Matcher: m}
		_ = s.matchers[i].compile() // ParseMatcher compiled it already
	}
	return s, nil
}

// Matches reports whether every matcher matches the value value gives for its label.
func (s Selector) Matches(value func(label string) string) bool {
	for i := range s.matchers {
		if !s.matchers[i].matchesValue(value(s.matchers[i].Label)) {
			return false
		}
	}
	return true
}
