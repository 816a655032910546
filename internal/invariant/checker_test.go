package invariant

import (
	"strings"
	"testing"
	"time"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

var t0 = time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)

const timeout = 10 * time.Second

// run is one device's history: signals at offsets from t0 and events raised at offsets from t0.
type run struct {
	c     *Checker
	order int64
}

func newRun() *run { return &run{c: New(Options{InFlight: InFlightFor(0)})} }

// signal records a signal begun at at and acknowledged 10 ms later.
func (r *run) signal(at time.Duration) {
	r.c.Signal("d", t0.Add(at), t0.Add(at+10*time.Millisecond), timeout)
}

// emit records an event of kind for the incident whose deadline is deadline, raised at at.
func (r *run) emit(kind event.Kind, deadline, at time.Duration, repeat int) event.Event {
	e := event.New(kind, "d", "default", t0.Add(deadline), t0, t0.Add(at), repeat)
	r.order++
	r.c.Event(e, r.order)
	return e
}

func rules(rep Report) string {
	var out []string
	for _, v := range rep.Violations {
		out = append(out, v.Rule)
	}
	return strings.Join(out, ",")
}

func TestCleanIncidentsPass(t *testing.T) {
	r := newRun()
	r.signal(0)
	r.emit(event.Interrupted, timeout, timeout+5*time.Millisecond, 0)
	r.emit(event.Alarm, timeout, 2*timeout, 1)
	r.emit(event.Acked, timeout, 2*timeout+time.Second, 0)
	r.signal(3 * timeout)
	r.emit(event.Recovered, timeout, 3*timeout+10*time.Millisecond, 0)
	// A second incident after the first closed, opened by late.
	r.emit(event.Late, 3*timeout+5*time.Second, 3*timeout+5*time.Second, 0)
	r.emit(event.Interrupted, 4*timeout, 4*timeout, 0)
	// A duplicate of the first interruption (a resend after a crash) changes nothing.
	r.c.Event(event.New(event.Interrupted, "d", "default", t0.Add(timeout), t0, t0.Add(timeout+5*time.Millisecond), 0), 99)
	rep := r.c.Check()
	if len(rep.Violations) != 0 || rep.Incidents != 2 || rep.Open != 1 || rep.Duplicates != 1 {
		t.Fatalf("report %+v, want 2 incidents, 1 open, 1 duplicate and no violation:\n%s", rep, rep.Details(10))
	}
}

// The lost recovered of an incident replaced while Kafka was down: interrupted, interrupted.
func TestSecondInterruptedWhileOpenBreaksTheMachine(t *testing.T) {
	r := newRun()
	r.signal(0)
	r.emit(event.Interrupted, timeout, timeout, 0)
	r.signal(timeout + time.Second)
	r.emit(event.Interrupted, 2*timeout+time.Second, 2*timeout+time.Second, 0)
	// The first incident never closed: the second interrupted is refused, and its recovered is owed.
	if got, want := rules(r.c.Check()), RuleMachine+","+RuleRecovered; got != want {
		t.Fatalf("violations %q, want %q", got, want)
	}
}

func TestMissingRecoveredIsReported(t *testing.T) {
	r := newRun()
	r.signal(0)
	r.emit(event.Interrupted, timeout, timeout, 0)
	r.signal(timeout + time.Second)
	if got := rules(r.c.Check()); got != RuleRecovered {
		t.Fatalf("violations %q, want %q", got, RuleRecovered)
	}
	r.emit(event.Recovered, timeout, timeout+time.Second+20*time.Millisecond, 0)
	if rep := r.c.Check(); len(rep.Violations) != 0 {
		t.Fatalf("after the recovered: %s", rep.Details(10))
	}
}

// A signal sent just before the interruption may have reached heartbeatd after its claim: neither false
// nor owed a recovered, though a recovered is welcome.
func TestSignalsWithinInFlightAreNotJudged(t *testing.T) {
	r := newRun()
	r.signal(0)
	r.signal(timeout - 100*time.Millisecond)
	r.emit(event.Interrupted, timeout, timeout, 0)
	r.signal(timeout + 100*time.Millisecond)
	if rep := r.c.Check(); len(rep.Violations) != 0 {
		t.Fatalf("violations:\n%s", rep.Details(10))
	}
}

func TestFalseInterruptionIsReported(t *testing.T) {
	for _, kind := range []event.Kind{event.Interrupted, event.Suppressed} {
		r := newRun()
		r.signal(0)
		r.signal(5 * time.Second)
		// A deferred incident (a quiet interval) that comes due later must still respect the latest signal.
		r.emit(kind, timeout, timeout+2*time.Second, 0)
		if got := rules(r.c.Check()); got != RuleFalse {
			t.Fatalf("%s: violations %q, want %q", kind, got, RuleFalse)
		}
	}
}

// An incident heartbeatd could only report late (blind at its deadline and after) is real if the device
// had gone silent: it came back before the report, which makes the incident short, not false; its
// recovered is owed.
func TestLateReportOfARealSilenceIsNotFalse(t *testing.T) {
	r := newRun()
	r.signal(0)
	r.signal(timeout + 5*time.Second) // back 5 s after its deadline, before the report
	r.emit(event.Interrupted, timeout, timeout+8*time.Second, 0)
	if got := rules(r.c.Check()); got != RuleRecovered {
		t.Fatalf("violations %q, want only the owed %q", got, RuleRecovered)
	}
	r.emit(event.Recovered, timeout, timeout+9*time.Second, 0)
	if rep := r.c.Check(); len(rep.Violations) != 0 {
		t.Fatalf("violations:\n%s", rep.Details(10))
	}
}

// Signals a broker dropped while no replica was subscribed never reach heartbeatd: its deadline is older
// than the truth, but a device quiet for its timeout when the report was raised was really silent.
func TestReportOfADeviceSilentWhenRaisedIsNotFalse(t *testing.T) {
	r := newRun()
	r.signal(0)
	r.signal(timeout - 2*time.Second) // dropped by the broker: heartbeatd's deadline stays at timeout
	r.emit(event.Interrupted, timeout, 2*timeout, 0)
	if rep := r.c.Check(); len(rep.Violations) != 0 {
		t.Fatalf("violations:\n%s", rep.Details(10))
	}
}

func TestDegradedAndReportedFailuresAreNotFalse(t *testing.T) {
	r := newRun()
	r.signal(0)
	r.signal(5 * time.Second)
	e := event.New(event.Interrupted, "d", "default", t0.Add(6*time.Second), t0, t0.Add(6*time.Second), 0)
	e.Cause = event.CauseReported
	r.c.Event(e, 1)
	r.emit(event.Recovered, 6*time.Second, 7*time.Second, 0)
	e = event.New(event.Interrupted, "d", "default", t0.Add(8*time.Second), t0, t0.Add(8*time.Second), 0)
	e.Degraded = true
	r.c.Event(e, 3)
	if rep := r.c.Check(); len(rep.Violations) != 0 {
		t.Fatalf("violations:\n%s", rep.Details(10))
	}
}

func TestEventsOutsideAnIncident(t *testing.T) {
	for _, kind := range []event.Kind{event.Recovered, event.Alarm, event.Exhausted, event.Acked} {
		r := newRun()
		r.emit(kind, timeout, timeout, 1)
		if got := rules(r.c.Check()); got != RuleMachine {
			t.Errorf("%s alone: violations %q, want %q", kind, got, RuleMachine)
		}
	}
	// Operator acts on a device without an incident are fine, and a delete closes an open one.
	r := newRun()
	r.emit(event.Silenced, 0, 0, 0)
	r.emit(event.Interrupted, timeout, timeout, 0)
	r.emit(event.Deleted, 2*timeout, 2*timeout, 0)
	r.emit(event.Deleted, 3*timeout, 3*timeout, 0)
	if rep := r.c.Check(); len(rep.Violations) != 0 || rep.Open != 0 {
		t.Fatalf("report %+v:\n%s", rep, rep.Details(10))
	}
}

func TestOneIDOneEvent(t *testing.T) {
	r := newRun()
	e := r.emit(event.Interrupted, timeout, timeout, 0)
	e.Kind = event.Alarm
	r.c.Event(e, 5) // another event under the interruption's id
	forged := event.New(event.Recovered, "d", "default", t0.Add(timeout), t0, t0.Add(2*timeout), 0)
	forged.ID = "d/1/recovered/0"
	r.c.Event(forged, 6)
	if got := rules(r.c.Check()); got != RuleID+","+RuleID {
		t.Fatalf("violations %q, want two %q", got, RuleID)
	}
}

// Events read out of order (a second read of the topic) are put back in their partition's order.
func TestOrderIsThePartitionsNotTheReads(t *testing.T) {
	c := New(Options{})
	rec := event.New(event.Recovered, "d", "default", t0.Add(timeout), t0, t0.Add(2*timeout), 0)
	intr := event.New(event.Interrupted, "d", "default", t0.Add(timeout), t0, t0.Add(timeout), 0)
	c.Event(rec, 2)
	c.Event(intr, 1)
	if rep := c.Check(); len(rep.Violations) != 0 {
		t.Fatalf("violations:\n%s", rep.Details(10))
	}
}

// A signal its sender was slow to get acknowledged (a backlog of its own) may reach heartbeatd after the
// interruption: it is not judged heard before its acknowledgement.
func TestSignalAcknowledgedLateIsNotJudgedHeard(t *testing.T) {
	r := newRun()
	r.signal(0)
	r.c.Signal("d", t0.Add(5*time.Second), t0.Add(timeout+200*time.Millisecond), timeout) // acked after the event
	r.emit(event.Interrupted, timeout, timeout+time.Millisecond, 0)
	r.emit(event.Recovered, timeout, timeout+300*time.Millisecond, 0)
	if rep := r.c.Check(); len(rep.Violations) != 0 {
		t.Fatalf("violations:\n%s", rep.Details(10))
	}
}

// The machine's table: every phase answers every device kind, and outage events are nobody's.
func TestPhaseTable(t *testing.T) {
	for _, k := range []event.Kind{event.OutageStarted, event.OutageEnded, event.Watchdog} {
		if event.DeviceKind(k) {
			t.Errorf("%s is taken as a device event", k)
		}
	}
	p := event.Closed
	for _, step := range []struct {
		kind event.Kind
		want event.Phase
	}{{event.Late, event.Warned}, {event.Suppressed, event.SuppressedPhase}, {event.Interrupted, event.Open},
		{event.Alarm, event.Open}, {event.Exhausted, event.Open}, {event.Recovered, event.Closed}} {
		next, err := p.Next(step.kind)
		if err != nil || next != step.want {
			t.Fatalf("%s after %s: %s, %v; want %s", step.kind, p, next, err, step.want)
		}
		p = next
	}
}

func TestOpenIncidentsCountsWhatCheckCallsOpen(t *testing.T) {
	r := newRun()
	r.signal(0)
	r.emit(event.Interrupted, timeout, timeout, 0)
	if got, want := r.c.OpenIncidents(), r.c.Check().Open; got != 1 || got != want {
		t.Fatalf("OpenIncidents %d, Check's Open %d, want 1", got, want)
	}
	r.emit(event.Recovered, timeout, timeout+time.Second, 0)
	if got := r.c.OpenIncidents(); got != 0 {
		t.Fatalf("OpenIncidents %d after the recovered, want 0", got)
	}
}
