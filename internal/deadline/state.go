package deadline

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// State is what Redis keeps about an interrupted device (an incident; see doc.go), encoded in the slot's
// state hash as its fields in order, separated by stateSep (Encode). The deadline comes first because the
// scripts compare it to guard against acknowledging a stale incident; the reason comes last because it is
// free text. A committed incident is stored as the bare deadlines-set score instead (see decodeState).
type State struct {
	Deadline      int64 // ms; identifies the incident
	TypeIndex     int   // index in the type registry
	Next          int   // repeat number of the next event to send; 0 = interrupted not sent yet
	Acked         bool  // an operator acknowledged: no more repeats until recovery
	Exhausted     bool  // max_repeats reached: no more repeats until recovery
	Hold          Hold  // why the next act waits on other devices (a parent, a group); kept in the exhausted field
	InterruptedAt int64 // ms when the interrupted event was first published (HoldGroup: since when it waits; HoldQuiet: the moved deadline; HoldLate: when it is interrupted); 0 = not yet
	Failures      int   // consecutive publish failures of the current act
	// Owed is the deadline (as stored) of the device's previous incident, whose `recovered` is not
	// published yet: the device came back and fell silent again before it went out, and this incident
	// replaced that one. It stays until the recovery is published, so neither a retry nor a crash loses
	// it (docs/concepts.md#the-incident). 0: nothing owed.
	Owed int64
	// OwedWarned: that incident was only reported late, so its recovered carries the warning's deadline.
	OwedWarned bool
	Reason     string // why the claim was parked, if it was
}

// The fields of an encoded State, in order. Encode and decodeState write and read them; the Lua patterns
// and formats below are derived from the same order.
const (
	fieldDeadline = iota
	fieldType
	fieldNext
	fieldAcked
	fieldExhausted
	fieldInterruptedAt
	fieldFailures
	fieldOwed
	fieldOwedWarned
	fieldReason
	stateFields
)

// stateSep separates the fields of an encoded State. A committed incident's bare score has none.
const stateSep = ":"

// The Lua side of the encoding (see scripts.go): patterns that read one field of a full state, and
// string.format formats that write one. Every field before the acked flag is a number.
var (
	stateDeadlinePattern = stateFieldPattern(fieldDeadline) // captures the deadline
	stateTypePattern     = stateFieldPattern(fieldType)     // captures the type index
	stateAckedPattern    = "^" + strings.Repeat(`%d+`+stateSep, fieldAcked) + "1" + stateSep
	// stateUnackedPattern captures what precedes a cleared acked flag; gsub with stateSetAcked sets it.
	stateUnackedPattern = "^(" + strings.Repeat(`%d+`+stateSep, fieldAcked) + ")0" + stateSep
	stateSetAcked       = "%1" + "1" + stateSep
	// stateFailuresPattern captures what precedes the failure count; gsub with stateNoFailures clears it.
	stateFailuresPattern = "^(" + strings.Repeat(`%d+`+stateSep, fieldFailures) + ")%d+" + stateSep
	stateNoFailures      = "%1" + "0" + stateSep
	// stateCommittedFormat(deadline, type index, deadline): a committed incident spelled in full, as
	// decodeState reads its bare score.
	stateCommittedFormat = stateFormat(map[int]string{fieldDeadline: "%.0f", fieldType: "%d", fieldNext: "1", fieldInterruptedAt: "%.0f"})
	// stateReplacingFormat(deadline, type index, owed, owed warned): a fresh incident, nothing sent, that
	// replaced an open one and owes its recovery (State.Owed).
	stateReplacingFormat = stateFormat(map[int]string{fieldDeadline: "%.0f", fieldType: "%d", fieldOwed: "%s", fieldOwedWarned: "%s"})
	// Patterns capturing the fields a replacing claim reads of the incident it replaces (State.owing).
	stateNextPattern       = stateFieldPattern(fieldNext)
	stateHoldPattern       = stateFieldPattern(fieldExhausted)
	stateOwedPattern       = stateFieldPattern(fieldOwed)
	stateOwedWarnedPattern = stateFieldPattern(fieldOwedWarned)
	// stateWaitingPattern matches an incident with nothing sent and nothing held, what a child waiting for
	// its parent's verdict is stored as (wake.go), and captures its deadline and type index.
	// A child that owes an earlier incident's recovery is not waiting: its own claim reports that first.
	stateWaitingPattern = "^" + strings.Repeat(`(%d+)`+stateSep, fieldNext) + strings.Repeat("0"+stateSep, fieldInterruptedAt-fieldNext) +
		strings.Repeat(`%d+`+stateSep, fieldOwed-fieldInterruptedAt) + strings.Repeat("0"+stateSep, fieldReason-fieldOwed)
	// stateSuppressedFormat(deadline, type index, now): `suppressed` sent under a down parent at now;
	// stateSuppressedPattern matches it, however it was written (a wake's commit or an acknowledgement).
	stateSuppressedFormat = stateFormat(map[int]string{fieldDeadline: "%.0f", fieldType: "%d", fieldNext: "1", fieldExhausted: string(holdFieldParent), fieldInterruptedAt: "%.0f"})
	// stateSuppressedTail(now) is what follows a suppression's deadline, type index and stateSep, so a
	// script appends it to the waiting state's first two fields.
	stateSuppressedTail    = strings.SplitN(stateSuppressedFormat, stateSep, fieldNext+1)[fieldNext]
	stateSuppressedPattern = "^" + strings.Repeat(`%d+`+stateSep, fieldNext) + "1" + stateSep + "0" + stateSep +
		string(holdFieldParent) + stateSep + `%d+` + stateSep + strings.Repeat("0"+stateSep, fieldReason-fieldFailures) + "$"
)

// holdFieldLate is the exhausted field of an incident reported late (quietField), for the scripts.
var holdFieldLate = string(State{Hold: HoldLate}.quietField())

// stateLatePattern matches an incident reported only `late` (HoldLate, nothing else sent) and captures
// its deadline, type index, acked flag, InterruptedAt and the fields after it, so a reported failure
// can bring its interruption forward (cause.go).
var stateLatePattern = "^" + strings.Repeat(`(%d+)`+stateSep, fieldNext) + "0" + stateSep + "([01])" + stateSep +
	holdFieldLate + stateSep + `(%d+)` + stateSep + "(.*)$"

// Reported reports whether consumers were told of the incident (interrupted, suppressed or late sent),
// so its end owes them a `recovered`.
func (s State) Reported() bool { return s.Next > 0 || s.Hold == HoldLate }

// owing is s, a fresh incident replacing prev, owing prev's recovery when prev was reported, else
// whatever prev owed. The claim does the same in Lua (claimsteps.go).
func (s State) owing(prev State) State {
	if prev.Reported() {
		s.Owed, s.OwedWarned = prev.Deadline, prev.Hold == HoldLate && prev.Next == 0
	} else {
		s.Owed, s.OwedWarned = prev.Owed, prev.OwedWarned
	}
	return s
}

// OwedIncident is the incident whose recovery s owes, as far as the alarm loop needs it to report that
// recovery (its deadline, its type, whether it was only late); nil when s owes none.
func (s State) OwedIncident() *State {
	if s.Owed == 0 {
		return nil
	}
	old := State{Deadline: s.Owed, TypeIndex: s.TypeIndex, Next: 1, InterruptedAt: s.Owed}
	if s.OwedWarned {
		old.Next, old.Hold, old.InterruptedAt = 0, HoldLate, 0
	}
	return &old
}

// holdFieldParent is the exhausted field of a state held under its parent (quietField).
var holdFieldParent = State{Hold: HoldParent}.quietField()

// stateFieldPattern is the Lua pattern that captures numeric field i of a full state.
func stateFieldPattern(i int) string {
	return "^" + strings.Repeat(`%d+`+stateSep, i) + `(%d+)` + stateSep
}

// stateFormat is a full state for string.format: the given fields, every other one 0 (reason: empty).
func stateFormat(fields map[int]string) string {
	f := make([]string, stateFields)
	for i := range f {
		if v, ok := fields[i]; ok {
			f[i] = v
		} else if i != fieldReason {
			f[i] = "0"
		}
	}
	return strings.Join(f, stateSep)
}

// encode renders s in the form the scripts read, its fields in order (fieldDeadline, …, fieldReason).
// It appends digits instead of formatting: the alarm loop encodes a state for every acknowledgement.
func (s State) encode() string {
	b := make([]byte, 0, 48+len(s.Reason))
	b = append(strconv.AppendInt(b, s.Deadline, 10), stateSep...)
	b = append(strconv.AppendInt(b, int64(s.TypeIndex), 10), stateSep...)
	b = append(strconv.AppendInt(b, int64(s.Next), 10), stateSep...)
	b = append(append(b, flag(s.Acked)), stateSep...)
	b = append(append(b, s.quietField()), stateSep...)
	b = append(strconv.AppendInt(b, s.InterruptedAt, 10), stateSep...)
	b = append(strconv.AppendInt(b, int64(s.Failures), 10), stateSep...)
	b = append(strconv.AppendInt(b, s.Owed, 10), stateSep...)
	b = append(append(b, flag(s.OwedWarned)), stateSep...)
	return string(append(b, s.Reason...))
}

// Hold says what an incident's next act waits on besides its own policy (docs/concepts.md).
type Hold byte

const (
	HoldNone Hold = iota
	// HoldParent: `suppressed` was sent because the parent is interrupted; no repeats while it is down.
	HoldParent
	// HoldAfterParent: the parent recovered; the device gets its own `interrupted` one timeout after
	// the parent's recovery signal unless it signals first.
	HoldAfterParent
	// HoldGroup: the `interrupted` waits (correlation.group_wait, from InterruptedAt) while one of the
	// device's groups may still reach its outage threshold; nothing was sent yet.
	HoldGroup
	// HoldQuiet: the deadline fell in a quiet interval of the device's type (docs/schedules.md); nothing
	// was sent, and InterruptedAt holds the moved deadline, the interval's end + timeout.
	HoldQuiet
	// HoldLate: `late` was sent at the warning (the incident's Deadline, last signal + warn_after, see
	// warn.go); nothing else yet. InterruptedAt holds when it is interrupted: last signal + timeout, or
	// later when that falls in a quiet interval.
	HoldLate
)

// quietField encodes the exhausted flag and the hold in one field: 0, 1 exhausted, 2 + hold − 1. Older
// states hold 0 or 1 there, so they decode unchanged.
func (s State) quietField() byte {
	switch {
	case s.Exhausted:
		return '1'
	case s.Hold != HoldNone:
		return '1' + byte(s.Hold)
	}
	return '0'
}

func holdOf(field string) Hold {
	if len(field) == 1 && field[0] > '1' && field[0] <= '1'+byte(HoldLate) {
		return Hold(field[0] - '1')
	}
	return HoldNone
}

func flag(b bool) byte {
	if b {
		return '1'
	}
	return '0'
}

// decodeState parses an encoded State: the full form Encode writes, or the bare deadline score
// (deadline×MaxTypes + type index) the claim stores for a committed incident, which saves Redis formatting
// a state per claim. A committed incident's `interrupted` counts as sent, and its repeats are timed from
// its deadline: the claim that committed it came within the detection lateness of it.
func decodeState(v string) (State, error) {
	if !strings.Contains(v, stateSep) {
		s, err := stateOfScore(v)
		s.Next, s.InterruptedAt = 1, s.Deadline
		return s, err
	}
	s, err := decodeFields(v, stateFields)
	if err != nil {
		// Written by a version without the owed fields (before 0.2): the reason follows the failures.
		if legacy, lerr := decodeFields(v, legacyStateFields); lerr == nil {
			return legacy, nil
		}
	}
	return s, err
}

// legacyStateFields is how many fields a state had before the owed recovery (fieldOwed, fieldOwedWarned)
// was kept in it; such a state's reason is its fieldOwed.
const legacyStateFields = stateFields - 2

// decodeFields parses a full state of n fields: stateFields, or legacyStateFields.
func decodeFields(v string, n int) (State, error) {
	f := strings.SplitN(v, stateSep, n)
	if len(f) != n {
		return State{}, fmt.Errorf("deadline: state %q: want %d fields, got %d", v, n, len(f))
	}
	var err error
	num := func(i int) int64 {
		n, perr := strconv.ParseInt(f[i], 10, 64)
		if perr != nil && err == nil {
			err = fmt.Errorf("deadline: state %q field %d: %w", v, i, perr)
		}
		return n
	}
	s := State{
		Deadline:      num(fieldDeadline),
		TypeIndex:     int(num(fieldType)),
		Next:          int(num(fieldNext)),
		Acked:         f[fieldAcked] == "1",
		Exhausted:     f[fieldExhausted] == "1",
		Hold:          holdOf(f[fieldExhausted]),
		InterruptedAt: num(fieldInterruptedAt),
		Failures:      int(num(fieldFailures)),
		Reason:        f[n-1],
	}
	if n == stateFields {
		s.Owed, s.OwedWarned = num(fieldOwed), f[fieldOwedWarned] == "1"
	}
	if err != nil {
		return State{}, err
	}
	return s, nil
}

// DeadlineTime is the incident's deadline as a time.
func (s State) DeadlineTime() time.Time { return time.UnixMilli(s.Deadline) }

// stateOfScore is the state of a just-claimed incident, nothing sent yet, from its deadlines-set score as
// Redis replies it.
func stateOfScore(score string) (State, error) {
	v, err := strconv.ParseInt(score, 10, 64)
	if err != nil { // Redis formats a score with %.17g: digits for any deadline before the year 2200
		f, ferr := strconv.ParseFloat(score, 64)
		v, err = int64(f), ferr
	}
	if err != nil || v < 0 {
		return State{}, fmt.Errorf("deadline: state %q: not a deadline score", score)
	}
	return State{Deadline: v / MaxTypes, TypeIndex: int(v % MaxTypes)}, nil
}
