package deadline

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// State is what Redis keeps about an interrupted device, encoded compactly in the slot's state hash as
// "deadline:type:next:acked:exhausted:interrupted_at:failures:reason". The deadline comes first because
// the scripts compare it to guard against acknowledging a stale incident; reason comes last because it is
// free text. A committed incident (see Commit in claim.go) is stored as the bare deadlines-set score
// "deadline×MaxTypes+type" that the claim moved (no colon): `interrupted` sent (or in flight, leased by
// its record), the next repeat 1, timed from the deadline.
type State struct {
	Deadline      int64  // ms; identifies the incident
	TypeIndex     int    // index in the type registry
	Next          int    // repeat number of the next event to send; 0 = interrupted not sent yet
	Acked         bool   // an operator acknowledged: no more repeats until recovery
	Exhausted     bool   // max_repeats reached: no more repeats until recovery
	InterruptedAt int64  // ms when the interrupted event was first published; 0 = not yet
	Failures      int    // consecutive publish failures of the current act
	Reason        string // why the claim was parked, if it was
}

// Encode renders s in the form the scripts read.
// It appends digits instead of formatting: the alarm loop encodes a state for every acknowledgement.
func (s State) Encode() string {
	b := make([]byte, 0, 48+len(s.Reason))
	b = strconv.AppendInt(b, s.Deadline, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(s.TypeIndex), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(s.Next), 10)
	b = append(b, ':', flag(s.Acked), ':', flag(s.Exhausted), ':')
	b = strconv.AppendInt(b, s.InterruptedAt, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(s.Failures), 10)
	b = append(b, ':')
	return string(append(b, s.Reason...))
}

func flag(b bool) byte {
	if b {
		return '1'
	}
	return '0'
}

// DecodeState parses an encoded State: the full form Encode writes, or the bare deadline score
// ("deadline*MaxTypes+type") the claim script stores for a committed incident, which saves Redis
// formatting a state per claim. A committed incident's repeats are timed from its deadline: the claim
// that committed it came within the detection lateness of it.
func DecodeState(v string) (State, error) {
	if !strings.Contains(v, ":") {
		s, err := stateOfScore(v)
		s.Next, s.InterruptedAt = 1, s.Deadline
		return s, err
	}
	f := strings.SplitN(v, ":", 8)
	if len(f) != 8 {
		return State{}, fmt.Errorf("deadline: state %q: want 8 fields, got %d", v, len(f))
	}
	var s State
	var err error
	ints := []*int64{&s.Deadline, nil, nil, nil, nil, &s.InterruptedAt}
	for i, p := range ints {
		if p == nil {
			continue
		}
		if *p, err = strconv.ParseInt(f[i], 10, 64); err != nil {
			return State{}, fmt.Errorf("deadline: state %q field %d: %w", v, i, err)
		}
	}
	for i, p := range map[int]*int{1: &s.TypeIndex, 2: &s.Next, 6: &s.Failures} {
		if *p, err = strconv.Atoi(f[i]); err != nil {
			return State{}, fmt.Errorf("deadline: state %q field %d: %w", v, i, err)
		}
	}
	s.Acked, s.Exhausted, s.Reason = f[3] == "1", f[4] == "1", f[7]
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
