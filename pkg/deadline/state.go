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
// free text.
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
func (s State) Encode() string {
	return fmt.Sprintf("%d:%d:%d:%s:%s:%d:%d:%s", s.Deadline, s.TypeIndex, s.Next, flag(s.Acked), flag(s.Exhausted),
		s.InterruptedAt, s.Failures, s.Reason)
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// DecodeState parses an encoded State.
func DecodeState(v string) (State, error) {
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
