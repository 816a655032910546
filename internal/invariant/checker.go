// Package invariant checks a run's signals and events against what heartbeatd promises every consumer,
// whatever faults happen (docs/concepts.md#the-incident):
//
//  1. each device's events, duplicates dropped by id, follow the incident machine (event.Phase): one
//     incident at a time, opened by late, interrupted or suppressed, closed by one recovered or deleted;
//     a device that signalled after its incident opened gets that incident's recovered;
//  2. an event sent again carries the same id and the same content; no interrupted or suppressed for a
//     device heard within its timeout, deferred incidents included.
//
// The test suites that run the daemon (the chaos scenarios, the fleet suite, the soak) feed every signal a
// broker acknowledged and every event read from the events topic into one Checker and fail on any
// violation. The third promise, bounded Redis state, is checked against Redis itself by its own tests.
package invariant

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// DefaultInFlight is Options.InFlight when unset: the default ingest.max_lag (2s) and a clock margin.
const DefaultInFlight = 2*time.Second + clockMargin

// clockMargin covers how far the test's clock and heartbeatd's may differ, and a broker's own delay.
const clockMargin = 500 * time.Millisecond

// InFlightFor is Options.InFlight for a run whose heartbeatd has ingest.max_lag maxLag.
func InFlightFor(maxLag time.Duration) time.Duration { return maxLag + clockMargin }

// Options tune the checker to a run.
type Options struct {
	// InFlight bounds how long an acknowledged signal may take to be applied by heartbeatd before
	// missing it is heartbeatd's fault: its ingest.max_lag (a signal waiting longer opens a blind window
	// and holds detection back; one waiting less is taken as on time), plus a clock margin (InFlightFor).
	// A signal is taken as heard by an event raised InFlight after it, and as unheard by one raised less
	// than InFlight after it: only what falls outside that margin is judged.
	InFlight time.Duration
}

// Checker collects one run's signals and events; it is safe for concurrent use.
type Checker struct {
	inFlight time.Duration

	mu      sync.Mutex
	signals map[string][]sent     // device → its acknowledged signals
	events  map[string][]recorded // device → its events, first copy of each id
	byID    map[string]event.Event
	copies  int // copies beyond the first, of every id
	broken  []Violation
}

// sent is one acknowledged signal: when its sender began sending it, when its broker had acknowledged
// it, and the timeout it gives the device.
type sent struct {
	at, acked time.Time
	timeout   time.Duration
}

// recorded is an event with its position in its partition: a device's events are all in one partition,
// so the position orders them even when a second read of the topic brings a missed one in late.
type recorded struct {
	event.Event
	order int64
}

// New returns an empty checker.
func New(o Options) *Checker {
	if o.InFlight <= 0 {
		o.InFlight = DefaultInFlight
	}
	return &Checker{inFlight: o.InFlight, signals: map[string][]sent{}, events: map[string][]recorded{}, byID: map[string]event.Event{}}
}

// Signal records that device sent a signal, begun at at (the sender's clock, taken before sending) and
// acknowledged by its broker by acked, which gives the device timeout of silence before it may be
// reported. The two bound when heartbeatd can have heard it: not before at, and by acked + InFlight
// (a sender with a backlog acknowledges late). Record only valid signals: bad input proves nothing.
func (c *Checker) Signal(device string, at, acked time.Time, timeout time.Duration) {
	c.mu.Lock()
	c.signals[device] = append(c.signals[device], sent{at, acked, timeout})
	c.mu.Unlock()
}

// Event records one event read from the events topic at position order of its partition. Copies of an
// id already seen count as duplicates, and must say the same.
func (c *Checker) Event(e event.Event, order int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if first, ok := c.byID[e.ID]; ok {
		c.copies++
		if !sameEvent(first, e) {
			c.broken = append(c.broken, Violation{Device: e.DeviceID, Rule: RuleID, Detail: fmt.Sprintf("id %s sent as %s/%s/%d and as %s/%s/%d",
				e.ID, first.Kind, ms(first.Deadline), first.Repeat, e.Kind, ms(e.Deadline), e.Repeat)})
		}
		return
	}
	c.byID[e.ID] = e
	if !event.DeviceKind(e.Kind) {
		return
	}
	if want := event.ID(e.DeviceID, e.Deadline, e.Kind, e.Repeat); detectionID(e.Kind) && e.ID != want {
		c.broken = append(c.broken, Violation{Device: e.DeviceID, Rule: RuleID, Detail: fmt.Sprintf("%s event under id %s, want %s", e.Kind, e.ID, want)})
	}
	c.events[e.DeviceID] = append(c.events[e.DeviceID], recorded{e, order})
}

// detectionID reports whether events of kind k carry the id device/deadline/kind/repeat (docs/events.md#ids-and-duplicates).
func detectionID(k event.Kind) bool {
	switch k {
	case event.Interrupted, event.Late, event.Alarm, event.Exhausted, event.Recovered, event.Suppressed, event.Flapping, event.Acked:
		return true
	}
	return false
}

func sameEvent(a, b event.Event) bool {
	return a.Kind == b.Kind && a.DeviceID == b.DeviceID && a.Deadline.Equal(b.Deadline) && a.Repeat == b.Repeat
}

// The rules a Violation names.
const (
	RuleMachine   = "machine"   // an event the incident machine does not allow where it came
	RuleID        = "id"        // one event under two ids, or one id for two events
	RuleFalse     = "false"     // interrupted or suppressed for a device heard within its timeout at the deadline and when raised
	RuleRecovered = "recovered" // a device signalled after its incident opened, and the incident never closed
)

// Violation is one broken promise.
type Violation struct {
	Device string
	Rule   string
	Detail string
	// History is the device's events and signals, on its first violation of the incident machine or a
	// missing recovered: what to read to see why.
	History string
}

func (v Violation) String() string {
	if v.History != "" {
		return v.Rule + " " + v.Device + ": " + v.Detail + "\n  history: " + v.History
	}
	return v.Rule + " " + v.Device + ": " + v.Detail
}

// Report is the checker's verdict over what it recorded so far.
type Report struct {
	Incidents  int // incidents opened
	Open       int // incidents still open
	Duplicates int // copies beyond the first of every id
	Violations []Violation
}

// Summary is the report as an accounting line's fields.
func (r Report) Summary() string {
	return fmt.Sprintf("incidents=%d open=%d violations=%d", r.Incidents, r.Open, len(r.Violations))
}

// Details lists how many violations each rule has, then up to n of them, one a line.
func (r Report) Details(n int) string {
	var b strings.Builder
	byRule := map[string]int{}
	for _, v := range r.Violations {
		byRule[v.Rule]++
	}
	for _, rule := range sortedKeys(byRule) {
		fmt.Fprintf(&b, "%s: %d  ", rule, byRule[rule])
	}
	if len(byRule) > 0 {
		b.WriteByte('\n')
	}
	for _, v := range r.Violations[:min(n, len(r.Violations))] {
		b.WriteString(v.String())
		b.WriteByte('\n')
	}
	if len(r.Violations) > n {
		fmt.Fprintf(&b, "… and %d more\n", len(r.Violations)-n)
	}
	return b.String()
}

// OpenIncidents counts the devices whose events leave an incident open, without judging anything else:
// cheap enough to poll while a long run's signals keep arriving (Check reads every signal recorded).
func (c *Checker) OpenIncidents() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for device, evs := range c.events {
		slices.SortStableFunc(evs, func(a, b recorded) int { return cmp.Compare(a.order, b.order) })
		if _, open, _ := walk(device, evs); open != nil {
			n++
		}
	}
	return n
}

// Check judges everything recorded so far. A recovered still on its way shows as a RuleRecovered
// violation until it arrives: a caller that has just stopped its faults polls Check until it is clean or
// its patience runs out.
func (c *Checker) Check() Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := Report{Duplicates: c.copies, Violations: slices.Clone(c.broken)}
	for _, device := range sortedKeys(c.events) {
		evs := c.events[device]
		slices.SortStableFunc(evs, func(a, b recorded) int { return cmp.Compare(a.order, b.order) })
		signals := c.signals[device]
		slices.SortFunc(signals, func(a, b sent) int { return a.at.Compare(b.at) })
		r.Violations = append(r.Violations, c.falseReports(device, evs, signals)...)
		opened, open, broken := walk(device, evs)
		r.Incidents += opened
		if len(broken) > 0 {
			broken[0].History = history(evs, signals)
		}
		r.Violations = append(r.Violations, broken...)
		if open != nil {
			r.Open++
			// Back after its deadline owes the recovered, also when that was before a late report.
			if s, ok := signalledAfter(signals, earlier(open.Deadline, open.At).Add(c.inFlight)); ok {
				r.Violations = append(r.Violations, Violation{device, RuleRecovered, fmt.Sprintf(
					"signalled at %s after its incident %s (raised at %s), and no recovered followed", stamp(s), open.ID, stamp(open.At)),
					history(evs, signals)})
			}
		}
	}
	return r
}

// walk folds a device's events through the incident machine: it returns how many incidents opened, the
// event that opened the one still open (nil if none) and each event the machine refused.
func walk(device string, evs []recorded) (opened int, open *event.Event, broken []Violation) {
	phase := event.Closed
	for i := range evs {
		e := &evs[i].Event
		next, err := phase.Next(e.Kind)
		if err != nil {
			broken = append(broken, Violation{Device: device, Rule: RuleMachine, Detail: fmt.Sprintf("%s (event %s at %s)", err, e.ID, stamp(e.At))})
			continue
		}
		if phase == event.Closed && next != event.Closed {
			opened++
			open = e
		}
		if next == event.Closed {
			open = nil
		}
		phase = next
	}
	return opened, open, broken
}

// falseReports finds the interrupted and suppressed events whose device was never silent for its
// timeout around the incident: heard within it both at the incident's deadline and when the event was
// raised. Heard at t: a signal acknowledged at least InFlight before t, whose timeout counted from when
// it was begun had not run out InFlight after t. The deadline is the one the event carries, moved past a
// quiet interval or a parent's wait where heartbeatd deferred the incident, so a deferred incident that
// comes due for a device that kept signalling is judged too. Either moment silent makes the report
// true: silent at the deadline, an incident reported late (heartbeatd blind at its deadline and after)
// whose device came back meanwhile is short, not false, and its recovered follows; silent when raised,
// the device went quiet after signals heartbeatd could not receive (a broker that dropped them while no
// replica was subscribed), and its deadline is older than the truth but the silence is real.
// Events that say they may be false (degraded) or that report a failure the device sent are not judged.
func (c *Checker) falseReports(device string, evs []recorded, signals []sent) []Violation {
	var out []Violation
	for _, e := range evs {
		if (e.Kind != event.Interrupted && e.Kind != event.Suppressed) || e.Degraded || e.Cause != "" {
			continue
		}
		s, atDeadline := c.heardAt(signals, e.Deadline)
		if _, atRaise := c.heardAt(signals, e.At); atDeadline && atRaise {
			out = append(out, Violation{Device: device, Rule: RuleFalse, Detail: fmt.Sprintf("%s at %s, but it signalled at %s with a timeout of %s",
				e.ID, stamp(e.At), stamp(s.at), s.timeout), History: sentBetween(signals, e.Deadline.Add(-2*s.timeout), e.At)})
		}
	}
	return out
}

// heardAt reports whether the device was heard within its timeout at t, and the signal that says so:
// the latest acknowledged InFlight before t sets the deadline (a retyped device's included).
func (c *Checker) heardAt(signals []sent, t time.Time) (sent, bool) {
	latest := t.Add(-c.inFlight)
	for i := len(signals) - 1; i >= 0; i-- {
		if s := signals[i]; !s.acked.After(latest) {
			return s, t.Add(c.inFlight).Before(s.at.Add(s.timeout))
		}
	}
	return sent{}, false
}

// history is a device's events (kind, deadline, raised) and how many signals it sent between them.
func history(evs []recorded, signals []sent) string {
	var b strings.Builder
	j := 0
	for _, e := range evs {
		k := 0
		for ; j < len(signals) && signals[j].at.Before(e.At); j++ {
			k++
		}
		if k > 0 {
			fmt.Fprintf(&b, " [%d signals to %s]", k, stamp(signals[j-1].at))
		}
		fmt.Fprintf(&b, " %s(%s)@%s", e.Kind, stamp(e.Deadline), stamp(e.At))
	}
	if j < len(signals) {
		fmt.Fprintf(&b, " [%d signals to %s]", len(signals)-j, stamp(signals[len(signals)-1].at))
	}
	return strings.TrimSpace(b.String())
}

// sentBetween lists the signals begun from from to to: when each was begun and acknowledged.
func sentBetween(signals []sent, from, to time.Time) string {
	var b strings.Builder
	for _, s := range signals {
		if !s.at.Before(from) && !s.at.After(to) {
			fmt.Fprintf(&b, " sent %s acked %s;", stamp(s.at), stamp(s.acked))
		}
	}
	return "signals" + strings.TrimSuffix(b.String(), ";")
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// signalledAfter is the first signal sent at or after t.
func signalledAfter(signals []sent, t time.Time) (time.Time, bool) {
	i, _ := slices.BinarySearchFunc(signals, t, func(s sent, t time.Time) int { return s.at.Compare(t) })
	if i == len(signals) {
		return time.Time{}, false
	}
	return signals[i].at, true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000") }

func ms(t time.Time) string { return fmt.Sprint(t.UnixMilli()) }
