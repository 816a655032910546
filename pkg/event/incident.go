package event

import (
	"fmt"
	"sort"
)

// Phase is where a device's incident stands as its events tell it: the state machine every device's
// event stream follows (docs/concepts.md#the-incident). A consumer that folds a device's events, duplicates
// dropped by id, through Phase.Next always knows whether the device has an open incident and how it began.
type Phase uint8

const (
	// Closed: no open incident (never had one, or it ended with recovered or deleted).
	Closed Phase = iota
	// Warned: the incident opened with late; interrupted follows at the timeout unless the device signals.
	Warned
	// Suppressed: the incident opened (or went on) with suppressed, under an interrupted parent; the
	// device's own interrupted follows only if it stays silent after its parent recovered.
	SuppressedPhase
	// Open: interrupted was sent; repeats, exhausted and operator acts may follow until it closes.
	Open
)

func (p Phase) String() string {
	switch p {
	case Closed:
		return "closed"
	case Warned:
		return "late"
	case SuppressedPhase:
		return "suppressed"
	case Open:
		return "interrupted"
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// transitions is the machine, written once: for each phase, the kinds of event that may follow and the
// phase they lead to. A kind missing from a phase's row is a broken promise (docs/events.md#kinds).
// Kinds about no incident (outage_started, outage_ended, watchdog) are not device events and are no row's.
var transitions = [...]map[Kind]Phase{
	Closed: {
		Late: Warned, Suppressed: SuppressedPhase, Interrupted: Open, // an incident opens
		Deleted: Closed, Silenced: Closed, Unsilenced: Closed, Flapping: Closed,
	},
	Warned: {
		Interrupted: Open, Suppressed: SuppressedPhase, // the same incident, its deadline reached
		Recovered: Closed, Deleted: Closed,
		Acked: Warned, Silenced: Warned, Unsilenced: Warned, Flapping: Warned,
	},
	SuppressedPhase: {
		Interrupted: Open, // its parent recovered and it stayed silent: the same incident, now its own
		Recovered:   Closed, Deleted: Closed,
		Acked: SuppressedPhase, Silenced: SuppressedPhase, Unsilenced: SuppressedPhase, Flapping: SuppressedPhase,
	},
	Open: {
		Alarm: Open, Exhausted: Open, Acked: Open, Silenced: Open, Unsilenced: Open, Flapping: Open,
		Recovered: Closed, Deleted: Closed,
	},
}

// Next is the phase after an event of kind k, or an error naming the broken rule.
func (p Phase) Next(k Kind) (Phase, error) {
	if int(p) >= len(transitions) {
		return p, fmt.Errorf("event: unknown phase %d", p)
	}
	next, ok := transitions[p][k]
	if !ok {
		switch {
		case p != Closed && (k == Late || k == Interrupted || k == Suppressed):
			return p, fmt.Errorf("%s while an incident is open (%s): no incident opens while another is open", k, p)
		case p == Closed:
			return p, fmt.Errorf("%s without an open incident", k)
		}
		return p, fmt.Errorf("%s may not follow %s", k, p)
	}
	return next, nil
}

// Transition is one row of the machine: an event of Kind in phase From leads to phase To.
type Transition struct {
	From Phase
	Kind Kind
	To   Phase
}

func (t Transition) String() string { return fmt.Sprintf("%s × %s → %s", t.From, t.Kind, t.To) }

// Transitions lists every row of the machine, by phase then kind, so a test can walk them all and fail
// on a row it never reached (internal/alarm's TestIncidentMachineWalksEveryTransition).
func Transitions() []Transition {
	var out []Transition
	for from, row := range transitions {
		start := len(out)
		for k, to := range row {
			out = append(out, Transition{From: Phase(from), Kind: k, To: to})
		}
		sort.Slice(out[start:], func(i, j int) bool { return out[start+i].Kind < out[start+j].Kind })
	}
	return out
}

// DeviceKind reports whether events of kind k belong to one device's incident stream (Phase.Next takes
// them); outage and watchdog events do not.
func DeviceKind(k Kind) bool {
	for _, row := range transitions {
		if _, ok := row[k]; ok {
			return true
		}
	}
	return false
}
