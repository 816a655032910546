package alarm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/eventkafka"
	"github.com/heartbeatd/heartbeatd/internal/invariant"
	"github.com/heartbeatd/heartbeatd/internal/silence"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// machineYAML has a type for each way into and through an incident. t0 is Sunday 09:33:20 UTC, so
// "break" runs from t0+100s to t0+1600s.
const machineYAML = `
time_intervals:
  - name: break
    time_intervals: [{times: [{start_time: "09:35", end_time: "10:00"}]}]
types:
  default:  {timeout: 10s, repeat_every: 1m, max_repeats: 2}
  sleepy:   {timeout: 10s, repeat_every: 1m, quiet: [break]}
  warned:   {timeout: 30s, warn_after: 20s, repeat_every: 1m}
  hub:      {timeout: 10s, repeat_every: 30s}
  leaf:     {timeout: 3s, repeat_every: 5s}
  wleaf:    {timeout: 6s, warn_after: 3s, repeat_every: 5s}
  flappy:   {timeout: 2s, repeat_every: 3s, flapping: {count: 2, window: 1m}}
  wflappy:  {timeout: 6s, warn_after: 3s, repeat_every: 5s, flapping: {count: 2, window: 1m}}
  fleaf:    {timeout: 3s, repeat_every: 5s, flapping: {count: 2, window: 10m}}
  zleaf:    {timeout: 3s, repeat_every: 0s}
`

// machineWalk drives devices through the real scripts and the alarm loop and folds every event
// published, duplicates dropped by id as a consumer drops them, through event.Phase.Next: each event
// must be a row of the machine from the device's phase, and after every step the store must say what
// the phase says (storedPhase). It counts the rows walked.
type machineWalk struct {
	t      *testing.T
	f      *fixture
	acts   *Acts
	sil    *silence.Silences
	refuse *refuseInterrupted
	base   time.Duration // the running scenario's start, from T0
	phase  map[string]event.Phase
	seen   map[string]bool // event ids already folded
	walked map[event.Transition]int
	trail  map[string][]string // each device's kinds so far, for failure messages
	types  map[string]string   // each device's type, as its signals named it
	// promises checks the same run with internal/invariant, from the signals as well as the events.
	promises *invariant.Checker
	order    int64
}

func newMachineWalk(t *testing.T, f *fixture) *machineWalk {
	f.policies.Store(parsePolicies(t, machineYAML))
	require.NoError(t, f.Store.Load(context.Background(), f.policies.Load().Names()...))
	w := &machineWalk{t: t, f: f, sil: f.withActs(), acts: NewActs(ActsOptions{Sink: f.sink, Logger: zaptest.NewLogger(t)}),
		refuse: &refuseInterrupted{next: f.sink.Next, devices: map[string]bool{}},
		phase:  map[string]event.Phase{}, seen: map[string]bool{}, walked: map[event.Transition]int{}, trail: map[string][]string{},
		types: map[string]string{}, promises: invariant.New(invariant.Options{InFlight: time.Millisecond})}
	f.sink.Next = w.refuse
	f.handler = NewHandler(HandlerOptions{Store: f.Store, Sink: f.sink, Policies: f.policies.Load, Silences: f.silences,
		ParentWait: 5 * time.Second, MaxPublishAttempts: 3, Refused: eventkafka.Refused, Now: f.Clock.Now, Logger: zaptest.NewLogger(t)})
	return w
}

// scenario runs one scenario as a subtest from base, an offset from T0 past every earlier one's end. The
// scenarios share the fixture, the fold and the rows walked; each deletes its devices when done.
func (w *machineWalk) scenario(name string, base time.Duration, run func(t *testing.T)) {
	w.t.Helper()
	parent := w.t
	parent.Run(name, func(t *testing.T) {
		w.t = t
		defer func() { w.t = parent }()
		require.False(t, w.f.T0.Add(base).Before(w.f.Clock.Now()), "the scenario starts before the clock")
		w.base = base
		w.f.Clock.Set(w.f.T0.Add(base))
		run(t)
	})
}

// at moves the clock to base+d, claims every due device, hands the claims to the handler and folds
// what it published; it returns the published events as ids does.
func (w *machineWalk) at(d time.Duration) []string {
	w.t.Helper()
	return w.atWith(w.f.handler, d)
}

// atWith is at with handler h, which may stop between publishing and acknowledging like a crash.
func (w *machineWalk) atWith(h *Handler, d time.Duration) []string {
	w.t.Helper()
	w.f.Clock.Set(w.f.T0.Add(w.base + d))
	res := w.f.ClaimAll(w.t, deadline.ClaimOptions{})
	if err := h.Handle(context.Background(), res.Claims); !errors.Is(err, errCrashed) {
		require.NoError(w.t, err)
	}
	return w.take()
}

// take folds the events published since the last take and checks the store against the phases.
func (w *machineWalk) take() []string {
	w.t.Helper()
	events := w.f.sink.Take()
	for _, e := range events {
		w.order++
		w.promises.Event(e, w.order)
		if !event.DeviceKind(e.Kind) || w.seen[e.ID] {
			continue
		}
		w.seen[e.ID] = true
		from := w.phase[e.DeviceID]
		w.trail[e.DeviceID] = append(w.trail[e.DeviceID], string(e.Kind))
		to, err := from.Next(e.Kind)
		require.NoError(w.t, err, "%s: events %v (at t0+%v)", e.DeviceID, w.trail[e.DeviceID], e.At.Sub(w.f.T0))
		w.walked[event.Transition{From: from, Kind: e.Kind, To: to}]++
		w.phase[e.DeviceID] = to
	}
	for device, phase := range w.phase {
		d, found, err := w.f.Store.Device(context.Background(), device)
		require.NoError(w.t, err)
		stored := storedPhase(d, found)
		require.Equal(w.t, phase.String(), stored.String(), "%s: events %v, the store says %+v", device, w.trail[device], d.Incident)
	}
	return ids(events)
}

// storedPhase is the phase the store's view of a device implies: an open incident that told consumers
// something (late, suppressed, interrupted) or that still owes the recovery of one it replaced.
func storedPhase(d deadline.Device, found bool) event.Phase {
	if !found || d.Incident == nil {
		return event.Closed
	}
	switch st := *d.Incident; {
	case st.Owed != 0 && st.OwedWarned:
		return event.Warned
	case st.Owed != 0:
		return event.Open
	case st.Hold == deadline.HoldLate && st.Next == 0:
		return event.Warned
	case st.Next == 0: // claimed, nothing sent: a silence, a quiet interval, a parent's verdict, a failed publish
		return event.Closed
	case st.Hold == deadline.HoldParent || st.Hold == deadline.HoldAfterParent:
		return event.SuppressedPhase
	}
	return event.Open
}

func (w *machineWalk) signal(device, typ, parent string, d time.Duration) {
	w.t.Helper()
	if typ != "" {
		w.types[device] = typ
	}
	pol, _ := w.f.policies.Load().Lookup(w.types[device])
	seen := w.f.T0.Add(w.base + d)
	w.promises.Signal(device, seen, seen, pol.Timeout)
	require.NoError(w.t, w.f.Store.Refresh(context.Background(),
		[]deadline.Signal{{Device: device, Type: typ, Parent: parent, Seen: w.f.T0.Add(w.base + d)}}))
}

// ack and remove are the operator's acts as the API carries them out (internal/daemon's api.go: read
// the device, act on the store, publish the act's event); internal/alarm cannot import the daemon.
func (w *machineWalk) ack(device string) []string {
	w.t.Helper()
	ctx := context.Background()
	before, _, err := w.f.Store.Device(ctx, device)
	require.NoError(w.t, err)
	ok, err := w.f.Store.SetAcked(ctx, device, 0)
	require.NoError(w.t, err)
	require.True(w.t, ok, "%s has an open incident to acknowledge", device)
	pol, _ := w.f.policies.Load().Lookup(before.Type)
	w.acts.Publish(ctx, AckedEvent(device, before.Type, *before.Incident, pol, before.LastSignal, event.Act{By: "op"}, w.f.Clock.Now()))
	return w.take()
}

func (w *machineWalk) remove(device string) []string {
	w.t.Helper()
	ctx := context.Background()
	d, _, err := w.f.Store.Device(ctx, device)
	require.NoError(w.t, err)
	found, err := w.f.Store.Delete(ctx, device)
	require.NoError(w.t, err)
	require.True(w.t, found)
	stored := deadline.State{Deadline: d.Deadline.UnixMilli()}
	if d.Incident != nil {
		stored = *d.Incident
	}
	pol, _ := w.f.policies.Load().Lookup(d.Type)
	var dl, lastSeen time.Time
	if stored.Deadline > 0 {
		dl, lastSeen = EventTimes(stored, pol)
	}
	w.acts.Publish(ctx, DeletedEvent(device, d.Type, dl, dl.Sub(lastSeen), event.Act{By: "op"}, w.f.Clock.Now()))
	return w.take()
}

// silenceFor silences device for an hour, then ends the silence early: `silenced`, then `unsilenced`.
func (w *machineWalk) silenceFor(device string) []string {
	w.t.Helper()
	ctx := context.Background()
	sil, err := w.sil.Create(ctx, silence.Silence{DeviceID: device, Ends: w.f.Clock.Now().Add(time.Hour)})
	require.NoError(w.t, err)
	got := w.take()
	ok, err := w.sil.End(ctx, sil.ID, event.Act{By: "op"})
	require.NoError(w.t, err)
	require.True(w.t, ok)
	return append(got, w.take()...)
}

// refuseInterrupted is a Kafka that refuses the next `interrupted` of the devices named and takes the
// rest of its batch, as a produce request failing for one partition or one message does: the flapping
// that follows an interrupted in its batch goes out first (the rows × flapping of the phases before
// interrupted), and the claim is retried with both.
type refuseInterrupted struct {
	next    event.Sink
	devices map[string]bool
}

func (r *refuseInterrupted) Publish(ctx context.Context, events []event.Event) []error {
	errs := make([]error, len(events))
	var pass []event.Event
	var at []int
	for i, e := range events {
		if e.Kind == event.Interrupted && r.devices[e.DeviceID] {
			delete(r.devices, e.DeviceID)
			errs[i] = errors.New("kafka: not enough in-sync replicas")
			continue
		}
		pass, at = append(pass, e), append(at, i)
	}
	if len(pass) > 0 {
		for j, err := range r.next.Publish(ctx, pass) {
			errs[at[j]] = err
		}
	}
	return errs
}

// TestIncidentMachineWalksEveryTransition walks every row of the incident's machine (event.Phase, the
// table docs/concepts.md#the-incident draws) through the real Redis scripts and the alarm loop: each
// scenario drives its devices into the transitions it names, every event published is folded through
// Phase.Next (an event the table forbids fails the test), the store's view of each device must agree
// with its phase after every step, and a row no scenario reaches fails the test by name — a row added
// to the table needs a scenario here. The run's signals and events also pass internal/invariant's checker.
func TestIncidentMachineWalksEveryTransition(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		w := newMachineWalk(t, f)
		ms := time.Millisecond

		w.scenario("quiet interval defers", 0, func(t *testing.T) {
			w.signal("q", "sleepy", "", 95*time.Second) // deadline t0+105s, inside the break
			require.Empty(t, w.at(106*time.Second), "deferred: nothing sent, the store holds it quiet")
			require.Equal(t, []string{"q interrupted 0"}, w.at(1610*time.Second))
			w.signal("q", "", "", 1620*time.Second)
			require.Equal(t, []string{"q recovered 0"}, w.at(1620*time.Second+ms))
			w.remove("q") // closed × deleted
		})

		w.scenario("interrupted alarms exhausted recovered", 2000*time.Second, func(t *testing.T) {
			w.signal("r", "default", "", 0)
			require.Equal(t, []string{"r interrupted 0"}, w.at(10*time.Second+5*ms))
			require.Equal(t, []string{"r alarm 1"}, w.at(70*time.Second+5*ms))
			require.Equal(t, []string{"r alarm 2", "r exhausted 2"}, w.at(130*time.Second+5*ms))
			w.signal("r", "", "", 200*time.Second)
			require.Equal(t, []string{"r recovered 0"}, w.at(200*time.Second+ms))
			w.remove("r")
		})

		w.scenario("operator acts", 2400*time.Second, func(t *testing.T) {
			w.signal("o", "default", "", 0)
			w.signal("idle", "default", "", 0)
			require.Equal(t, []string{"idle silenced 0", "idle unsilenced 0"}, w.silenceFor("idle")) // closed × silenced, unsilenced
			require.Equal(t, []string{"idle deleted 0"}, w.remove("idle"))
			require.Equal(t, []string{"o interrupted 0"}, w.at(10*time.Second+5*ms))
			require.Equal(t, []string{"o acked 0"}, w.ack("o"))
			require.Equal(t, []string{"o silenced 0", "o unsilenced 0"}, w.silenceFor("o"))
			require.Empty(t, w.at(70*time.Second+5*ms), "acked: no repeat")
			require.Equal(t, []string{"o deleted 0"}, w.remove("o"))
		})

		w.scenario("reported failure", 2800*time.Second, func(t *testing.T) {
			w.signal("p", "default", "", 0)
			w.f.fail("p", w.base+2*time.Second, "probe broken")
			require.Equal(t, []string{"p interrupted 0"}, w.at(2*time.Second+5*ms))
			w.signal("p", "", "", 5*time.Second)
			require.Equal(t, []string{"p recovered 0"}, w.at(5*time.Second+5*ms))
			w.remove("p")
		})

		w.scenario("late", 3200*time.Second, func(t *testing.T) {
			for _, d := range []string{"w1", "w2", "w3"} {
				w.signal(d, "warned", "", 0)
			}
			require.Equal(t, []string{"w1 late 0", "w2 late 0", "w3 late 0"}, w.at(20*time.Second+5*ms))
			require.Equal(t, []string{"w1 acked 0"}, w.ack("w1"))
			require.Equal(t, []string{"w1 silenced 0", "w1 unsilenced 0"}, w.silenceFor("w1"))
			w.signal("w2", "", "", 22*time.Second)
			require.Equal(t, []string{"w2 recovered 0"}, w.at(22*time.Second+5*ms))
			require.Equal(t, []string{"w3 deleted 0"}, w.remove("w3"))
			require.Equal(t, []string{"w1 interrupted 0"}, w.at(30*time.Second+5*ms))
			w.signal("w1", "", "", 40*time.Second)
			require.Equal(t, []string{"w1 recovered 0"}, w.at(40*time.Second+5*ms))
			w.remove("w1")
			w.remove("w2")
		})

		w.scenario("suppressed under a down parent", 3600*time.Second, func(t *testing.T) {
			w.signal("hub", "hub", "", 0)
			for _, c := range []string{"s1", "s2", "s3", "s4"} {
				w.signal(c, "leaf", "hub", 0)
			}
			w.signal("ws", "wleaf", "hub", 0)
			require.Equal(t, []string{"ws late 0"}, w.at(3*time.Second+5*ms), "the leaves wait for their hub's verdict; the warned one warns")
			require.Equal(t, []string{"ws acked 0"}, w.ack("ws"))
			require.Empty(t, w.at(6*time.Second+5*ms), "ws's interruption waits for the hub's verdict too, acknowledged or not")
			require.Equal(t, []string{"hub interrupted 0", "s1 suppressed 0", "s2 suppressed 0", "s3 suppressed 0", "s4 suppressed 0"},
				w.at(10*time.Second+5*ms))
			// ws, stored late, is not among the waiting children the hub's wake commits (deadline wake.go):
			// its own claim suppresses it, at the hub's deadline + parent_wait.
			require.Equal(t, []string{"ws suppressed 0"}, w.at(15*time.Second+5*ms))
			require.Equal(t, []string{"s1 acked 0"}, w.ack("s1"))
			require.Equal(t, []string{"s1 silenced 0", "s1 unsilenced 0"}, w.silenceFor("s1"))
			w.signal("s1", "", "hub", 16*time.Second)
			require.Equal(t, []string{"s1 recovered 0"}, w.at(16*time.Second+5*ms))
			w.remove("s1")
			require.Equal(t, []string{"s2 deleted 0"}, w.remove("s2"))
			require.Equal(t, []string{"s4 acked 0"}, w.ack("s4"))
			w.signal("hub", "", "", 20*time.Second)
			require.Equal(t, []string{"hub recovered 0"}, w.at(20*time.Second+5*ms))
			require.Equal(t, []string{"s3 interrupted 0", "s4 interrupted 0"}, w.at(23*time.Second+10*ms),
				"a leaf timeout after the hub's recovery; acknowledged while suppressed or not, as an ack while late (docs/events.md)")
			require.Equal(t, []string{"ws interrupted 0"}, w.at(26*time.Second+10*ms), "a wleaf timeout after it")
			require.Equal(t, []string{"s3 alarm 1"}, w.at(28*time.Second+20*ms), "the acknowledged one repeats no more")
			for _, d := range []string{"hub", "s3", "s4", "ws"} {
				w.remove(d)
			}
		})

		w.scenario("flapping in every phase", 4000*time.Second, func(t *testing.T) {
			// Open × flapping: the second interruption in the window, published whole.
			w.signal("fo", "flappy", "", 0)
			// Closed × flapping: the same, its interrupted refused once.
			w.signal("fc", "flappy", "", 0)
			require.Equal(t, []string{"fc interrupted 0", "fo interrupted 0"}, w.at(2*time.Second+5*ms))
			w.signal("fo", "", "", 3*time.Second)
			w.signal("fc", "", "", 3*time.Second)
			require.Equal(t, []string{"fc recovered 0", "fo recovered 0"}, w.at(3*time.Second+5*ms))
			w.refuse.devices["fc"] = true
			require.Equal(t, []string{"fc flapping 0", "fo flapping 0", "fo interrupted 0"}, w.at(5*time.Second+5*ms))
			require.Equal(t, []string{"fc flapping 0", "fc interrupted 0"}, w.at(6*time.Second+5*ms), "retried within a second, the flapping again")
			w.remove("fo")
			w.remove("fc")

			// Late × flapping: a warned type's second incident.
			w.signal("fw", "wflappy", "", 10*time.Second)
			require.Equal(t, []string{"fw late 0"}, w.at(13*time.Second+5*ms))
			require.Equal(t, []string{"fw interrupted 0"}, w.at(16*time.Second+5*ms))
			w.signal("fw", "", "", 17*time.Second)
			require.Equal(t, []string{"fw recovered 0"}, w.at(17*time.Second+5*ms))
			require.Equal(t, []string{"fw late 0"}, w.at(20*time.Second+5*ms))
			w.refuse.devices["fw"] = true
			require.Equal(t, []string{"fw flapping 0"}, w.at(23*time.Second+5*ms))
			require.Equal(t, []string{"fw flapping 0", "fw interrupted 0"}, w.at(24*time.Second+5*ms))
			w.remove("fw")

			// Suppressed × flapping: a leaf alarms on its own once (its hub signals), then is suppressed
			// under its silent hub and gets its own interruption, the second, after the hub's recovery.
			w.signal("fhub", "hub", "", 30*time.Second)
			w.signal("fs", "fleaf", "fhub", 30*time.Second)
			w.signal("fhub", "", "", 32*time.Second)
			require.Equal(t, []string{"fs interrupted 0"}, w.at(33*time.Second+5*ms))
			w.signal("fs", "", "fhub", 34*time.Second)
			require.Equal(t, []string{"fs recovered 0"}, w.at(34*time.Second+5*ms))
			require.Empty(t, w.at(37*time.Second+5*ms), "waits for its hub's verdict")
			require.Equal(t, []string{"fhub interrupted 0", "fs suppressed 0"}, w.at(42*time.Second+5*ms))
			w.signal("fhub", "", "", 50*time.Second)
			require.Equal(t, []string{"fhub recovered 0"}, w.at(50*time.Second+5*ms))
			w.refuse.devices["fs"] = true
			require.Equal(t, []string{"fs flapping 0"}, w.at(53*time.Second+5*ms))
			require.Equal(t, []string{"fs flapping 0", "fs interrupted 0"}, w.at(54*time.Second+5*ms))
			w.remove("fs")
			w.remove("fhub")
		})

		w.scenario("replaced while Kafka was down", 4400*time.Second, func(t *testing.T) {
			w.signal("x", "default", "", 0)
			require.Equal(t, []string{"x interrupted 0"}, w.at(10*time.Second+5*ms))
			w.f.sink.SetDown(true)
			w.signal("x", "", "", 11*time.Second) // its recovered cannot be published …
			require.Empty(t, w.at(11*time.Second+5*ms))
			require.Empty(t, w.at(21*time.Second+5*ms)) // … and it is silent again past its timeout
			w.f.sink.SetDown(false)
			require.Equal(t, []string{"x interrupted 0", "x recovered 0"}, w.at(60*time.Second))
			w.remove("x")
		})

		// The scenarios below walk no new row; they hold the faults and edges to the table too.
		w.scenario("late incident replaced while Kafka was down", 4800*time.Second, func(t *testing.T) {
			w.signal("xw", "warned", "", 0)
			require.Equal(t, []string{"xw late 0"}, w.at(20*time.Second+5*ms))
			w.f.sink.SetDown(true)
			w.signal("xw", "", "", 22*time.Second) // its recovered cannot be published …
			require.Empty(t, w.at(22*time.Second+5*ms))
			require.Empty(t, w.at(42*time.Second+5*ms)) // … and it is late again
			w.f.sink.SetDown(false)
			require.Equal(t, []string{"xw late 0", "xw recovered 0"}, w.at(45*time.Second))
			w.remove("xw")
		})

		w.scenario("suppressed without repeats", 5200*time.Second, func(t *testing.T) {
			w.signal("zhub", "hub", "", 0)
			w.signal("z", "zleaf", "zhub", 0)
			require.Empty(t, w.at(3*time.Second+5*ms))
			require.Equal(t, []string{"z suppressed 0", "zhub interrupted 0"}, w.at(10*time.Second+5*ms))
			require.Equal(t, []string{"zhub alarm 1"}, w.at(40*time.Second+10*ms), "nothing of the suppressed leaf")
			w.signal("zhub", "", "", 45*time.Second)
			require.Equal(t, []string{"zhub recovered 0"}, w.at(45*time.Second+5*ms))
			w.remove("zhub")
			require.Equal(t, []string{"z interrupted 0"}, w.at(48*time.Second+10*ms))
			require.Empty(t, w.at(80*time.Second), "no repeats")
			w.remove("z")
		})

		w.scenario("crash between publish and acknowledge, then back", 5600*time.Second, func(t *testing.T) {
			crashing := NewHandler(HandlerOptions{Store: f.Store, Sink: f.sink, Policies: f.policies.Load, Silences: f.silences,
				ParentWait: 5 * time.Second, Now: f.Clock.Now, Logger: zaptest.NewLogger(t)})
			batches := 0
			crashing.beforeAck = func() bool { batches++; return batches == 1 } // dies before releasing the leaf
			w.signal("chub", "hub", "", 0)
			w.signal("c", "leaf", "chub", 0)
			require.Empty(t, w.at(3*time.Second+5*ms))
			require.Equal(t, []string{"c suppressed 0", "chub interrupted 0"}, w.atWith(crashing, 10*time.Second+5*ms))
			w.signal("c", "", "chub", 12*time.Second)
			w.signal("chub", "", "", 12*time.Second)
			require.Equal(t, []string{"chub recovered 0"}, w.at(12*time.Second+5*ms))
			got := append(w.at(20*time.Second), w.at(41*time.Second)...) // by the end of the lease of its unreleased record
			require.Contains(t, got, "c recovered 0")
			require.NotContains(t, got, "c interrupted 0")
			w.remove("c")
			w.remove("chub")
		})

		w.scenario("silenced past its deadline; a parent deleted over its suppressed child", 6000*time.Second, func(t *testing.T) {
			ctx := context.Background()
			w.signal("q", "default", "", 0)
			sil, err := w.sil.Create(ctx, silence.Silence{DeviceID: "q", Ends: w.f.Clock.Now().Add(time.Hour)})
			require.NoError(t, err)
			require.Equal(t, []string{"q silenced 0"}, w.take())
			w.signal("dhub", "hub", "", 0)
			w.signal("d", "leaf", "dhub", 0)
			require.Empty(t, w.at(3*time.Second+5*ms))
			require.Equal(t, []string{"d suppressed 0", "dhub interrupted 0"}, w.at(10*time.Second+5*ms), "q is silenced")
			require.Equal(t, []string{"dhub deleted 0"}, w.remove("dhub"))
			ok, err := w.sil.End(ctx, sil.ID, event.Act{By: "op"})
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, []string{"q unsilenced 0"}, w.take())
			require.Equal(t, []string{"q interrupted 0"}, w.at(14*time.Second+5*ms), "re-armed when the silence ended")
			require.Equal(t, []string{"d interrupted 0"}, w.at(70*time.Second+10*ms),
				"its parent gone, the child's own interrupted at its next look (deadline.ParentRecheck)")
			w.remove("q")
			w.remove("d")
		})

		r := w.promises.Check()
		require.Empty(t, r.Violations, "internal/invariant:\n%s", r.Details(10))
		opened := 0
		for tr, n := range w.walked {
			if tr.From == event.Closed && tr.To != event.Closed {
				opened += n
			}
		}
		require.Equal(t, opened, r.Incidents, "the checker counts the incidents the walk opened")
		require.Zero(t, r.Open, "every scenario closes what it opened")

		var missed []string
		for _, tr := range event.Transitions() {
			if w.walked[tr] == 0 {
				missed = append(missed, tr.String())
			}
		}
		require.Empty(t, missed, "rows of event.Phase's table no scenario walks: add a scenario for each (walked: %v)", w.walked)
	})
}
