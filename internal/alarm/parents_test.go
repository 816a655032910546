package alarm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/eventkafka"
	"github.com/heartbeatd/heartbeatd/internal/scan"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// A hub (gateway) with a longer timeout than its leaves: the common case, where the children expire first.
const parentsYAML = `
types:
  default: {timeout: 10s, repeat_every: 1m}
  hub:     {timeout: 10s, repeat_every: 30s}
  leaf:    {timeout: 3s, repeat_every: 5s}
`

func parentsFixture(t *testing.T, f *fixture) {
	t.Helper()
	f.policies.Store(parsePolicies(t, parentsYAML))
	require.NoError(t, f.Store.Load(context.Background(), f.policies.Load().Names()...))
	f.handler = NewHandler(HandlerOptions{Store: f.Store, Sink: f.sink, Policies: f.policies.Load, Silences: f.silences,
		ParentWait: 5 * time.Second, Now: f.Clock.Now})
}

func (f *fixture) signalChild(device, typ, parent string, at time.Duration) {
	f.t.Helper()
	require.NoError(f.t, f.Store.Refresh(context.Background(),
		[]deadline.Signal{{Device: device, Type: typ, Parent: parent, Seen: f.T0.Add(at)}}))
}

// TestChildrenOfADownParentAreSuppressed: leaves that expire before their hub wait for its verdict, get
// one `suppressed` each once it is interrupted, and no repeats while it is down; when it recovers, the
// leaves still silent one leaf timeout later get their own `interrupted` (and repeats), the others
// report their recovery.
func TestChildrenOfADownParentAreSuppressed(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		parentsFixture(t, f)
		f.signal("hub", "hub", 0)
		for _, c := range []string{"c1", "c2", "c3"} {
			f.signalChild(c, "leaf", "hub", 0)
		}
		require.Empty(t, f.at(3*time.Second+5*time.Millisecond), "the leaves wait for their hub's verdict")
		require.Empty(t, f.at(9*time.Second))
		require.Equal(t, []string{"c1 suppressed 0", "c2 suppressed 0", "c3 suppressed 0", "hub interrupted 0"},
			f.at(10*time.Second+5*time.Millisecond), "the hub's verdict settles its waiting children in the same step")
		require.Empty(t, f.at(10*time.Second+6*time.Millisecond))
		d, _, err := f.Store.Device(context.Background(), "c1")
		require.NoError(t, err)
		require.Equal(t, deadline.HoldParent, d.Incident.Hold)

		require.Equal(t, []string{"hub alarm 1"}, f.at(40*time.Second+5*time.Millisecond), "no leaf repeats while the hub is down")

		f.signal("hub", "hub", 45*time.Second)
		require.Equal(t, []string{"hub recovered 0"}, f.at(45*time.Second+time.Millisecond))
		require.Empty(t, f.at(45*time.Second+2*time.Millisecond), "the leaves get one leaf timeout from the hub's recovery")
		f.signalChild("c1", "leaf", "hub", 46*time.Second)
		require.Equal(t, []string{"c1 recovered 0"}, f.at(46*time.Second+time.Millisecond))
		require.Equal(t, []string{"c2 interrupted 0", "c3 interrupted 0"}, f.at(48*time.Second+5*time.Millisecond))
		require.Equal(t, []string{"c2 alarm 1", "c3 alarm 1"}, f.at(53*time.Second+10*time.Millisecond), "their own repeats run")
	})
}

// TestChildOfALiveParentAlarmsOnItsOwn: a parent that signalled after the child's last signal explains
// nothing; nor does an unknown parent.
func TestChildOfALiveParentAlarmsOnItsOwn(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		parentsFixture(t, f)
		f.signal("hub", "hub", 0)
		f.signalChild("c1", "leaf", "hub", 0)
		f.signalChild("orphan", "leaf", "nobody", 0)
		f.signal("hub", "hub", 2*time.Second)
		require.Equal(t, []string{"c1 interrupted 0", "orphan interrupted 0"}, f.at(3*time.Second+5*time.Millisecond))
	})
}

// TestChildWaitsNoLongerThanParentWait: a parent that is silent but never declared down (its slot's
// scanner is behind) holds its children until its deadline + parent_wait, then they alarm on their own.
func TestChildWaitsNoLongerThanParentWait(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		parentsFixture(t, f)
		f.signal("hub", "hub", 0)
		f.signalChild("c1", "leaf", "hub", 0)
		require.Empty(t, f.at(3*time.Second+5*time.Millisecond))
		// Claim only the leaf's slot from now on: the hub's deadline passes unclaimed.
		leafOnly := func(d time.Duration) []string {
			f.Clock.Set(f.T0.Add(d))
			res, err := f.Store.Claim(context.Background(), []int{deadline.Slot("c1", f.Store.Slots())},
				deadline.ClaimOptions{Now: f.Clock.Now(), Lease: 30 * time.Second, Batch: 256})
			require.NoError(t, err)
			var out []string
			for _, c := range res.Claims {
				require.NotEqual(t, "hub", c.Device, "the test needs the hub in another slot")
			}
			require.NoError(t, f.handler.Handle(context.Background(), res.Claims))
			out = ids(f.sink.Take())
			return out
		}
		require.Empty(t, leafOnly(14*time.Second))
		require.Equal(t, []string{"c1 interrupted 0"}, leafOnly(15*time.Second+5*time.Millisecond))
	})
}

// leavesWaiting has the hub and its leaves signal at t0: the leaves wait for the hub's verdict from their
// deadline (3 s) on, and the hub's deadline is 10 s.
func (f *fixture) leavesWaiting(leaves ...string) {
	f.t.Helper()
	parentsFixture(f.t, f)
	f.signal("hub", "hub", 0)
	for _, c := range leaves {
		f.signalChild(c, "leaf", "hub", 0)
	}
	require.Empty(f.t, f.at(3*time.Second+5*time.Millisecond), "the leaves wait for their hub's verdict")
}

// TestSuppressionsCommittedByTheirParentsWakeSurviveACrash: the wake of a down parent stores the
// `suppressed` of its waiting children as sent (deadline wake.go), and the process that has the parent's
// verdict publishes them at once; one that dies after publishing them, before releasing them, leaves them
// to be published again with the same ids once the lease runs out, and never as their own `interrupted`.
func TestSuppressionsCommittedByTheirParentsWakeSurviveACrash(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		f.leavesWaiting("c1", "c2")
		crashing := NewHandler(HandlerOptions{Store: f.Store, Sink: f.sink, Policies: f.policies.Load, ParentWait: 5 * time.Second,
			Now: f.Clock.Now})
		batches := 0
		crashing.beforeAck = func() bool { batches++; return batches == 1 } // dies before releasing the leaves
		require.ElementsMatch(t, []string{"hub interrupted 0", "c1 suppressed 0", "c2 suppressed 0"},
			f.stepWith(crashing, 10*time.Second+5*time.Millisecond), "the hub's verdict and its leaves' in one step")
		d, _, err := f.Store.Device(context.Background(), "c1")
		require.NoError(t, err)
		require.Equal(t, deadline.HoldParent, d.Incident.Hold, "the wake stored the suppression")

		require.Empty(t, f.at(20*time.Second), "leased: not handed out again before the lease runs out")
		require.ElementsMatch(t, []string{"c1 suppressed 0", "c2 suppressed 0", "hub alarm 1"}, f.at(40*time.Second+7*time.Millisecond),
			"handed out again and published again; no leaf repeats while the hub is down")
		require.Empty(t, f.at(41*time.Second))
		require.Equal(t, []string{"hub alarm 2"}, f.at(70*time.Second+10*time.Millisecond),
			"the leaves look at their hub again, still down: nothing of theirs")

		recs := f.kafka.ReadAll(t, eventsTopic, 7, 10*time.Second)
		byDevice := map[string][]string{}
		for _, r := range recs {
			e, err := event.Decode(r.Value)
			require.NoError(t, err)
			if e.Kind == event.Suppressed {
				byDevice[e.DeviceID] = append(byDevice[e.DeviceID], e.ID)
			}
		}
		for _, c := range []string{"c1", "c2"} {
			require.Len(t, byDevice[c], 2, c)
			require.Equal(t, byDevice[c][0], byDevice[c][1], "consumers can drop the duplicate by id")
		}
	})
}

// TestChildSignallingBeforeItsParentsVerdictIsNotSuppressed: a child that signalled after its own deadline
// but before its parent's verdict recovered: nothing was reported for it, so nothing is published.
func TestChildSignallingBeforeItsParentsVerdictIsNotSuppressed(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		f.leavesWaiting("c1", "c2")
		f.signalChild("c1", "leaf", "hub", 10*time.Second)
		require.ElementsMatch(t, []string{"hub interrupted 0", "c2 suppressed 0"}, f.at(10*time.Second+5*time.Millisecond))
		require.Empty(t, f.at(10*time.Second+6*time.Millisecond), "c1's recovery publishes nothing")
		d, _, err := f.Store.Device(context.Background(), "c1")
		require.NoError(t, err)
		require.Nil(t, d.Incident, "c1 is online again")
	})
}

// TestParentsVerdictWakesTheScannerAtOnce: the scanner claims the children a parent's verdict woke right
// away, not at its next idle poll nor at the end of their wait for the parent (both an hour here).
func TestParentsVerdictWakesTheScannerAtOnce(t *testing.T) {
	srv := testenv.StartRedis(t)
	kafka := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{eventsTopic}})
	policies := parsePolicies(t, `
types:
  default: {timeout: 1m}
  hub:     {timeout: 1500ms, repeat_every: 0s}
  leaf:    {timeout: 500ms, repeat_every: 0s}
`)
	timeout := func(typ string) time.Duration { p, _ := policies.Lookup(typ); return p.Timeout }
	store, err := deadline.New(srv.Client(t), deadline.Options{Slots: 8, Timeout: timeout})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, store.Load(ctx, policies.Names()...))
	pub, err := eventkafka.NewPublisher(eventkafka.PublisherOptions{Brokers: kafka.Addrs, Topic: eventsTopic, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	h := NewHandler(HandlerOptions{Store: store, Sink: pub, Policies: func() *config.Policies { return policies },
		ParentWait: time.Hour, Logger: zaptest.NewLogger(t)})
	scanner := scan.NewScanner(scan.ScannerOptions{Store: store, Slots: func() []int { return testenv.AllSlots(8) },
		Handle: h.Handle, MaxIdleWait: time.Hour, Concurrency: 4, Logger: zaptest.NewLogger(t)})
	now := time.Now()
	signals := []deadline.Signal{{Device: "hub", Type: "hub", Seen: now}}
	for _, c := range []string{"c1", "c2", "c3", "c4", "c5", "c6"} {
		signals = append(signals, deadline.Signal{Device: c, Type: "leaf", Parent: "hub", Seen: now})
	}
	require.NoError(t, store.Refresh(ctx, signals))
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- scanner.Run(runCtx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	kinds := map[event.Kind]int{}
	kafka.ReadUntil(t, eventsTopic, 20*time.Second, func(recs []testenv.Record) bool {
		clear(kinds)
		for _, r := range recs {
			e, err := event.Decode(r.Value)
			require.NoError(t, err)
			kinds[e.Kind]++
		}
		return kinds[event.Suppressed] == 6
	})
	require.Equal(t, map[event.Kind]int{event.Interrupted: 1, event.Suppressed: 6}, kinds)
}

// TestChildMovedToAnotherParentIsNotSuppressedUnderItsFormer: a device belongs to the parent its last
// signal named. c1 moves from hubA to hubB and goes silent while both hubs are silent too: hubA's
// verdict leaves it waiting (its sibling c2, still under hubA, is suppressed), and hubB's suppresses it
// under hubB.
func TestChildMovedToAnotherParentIsNotSuppressedUnderItsFormer(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		parentsFixture(t, f)
		f.signal("hubA", "hub", 0)                       // down at 10 s
		f.signalChild("c1", "leaf", "hubA", 0)           // moves to hubB at 1 s
		f.signalChild("c2", "leaf", "hubA", 0)           // stays
		f.signalChild("c1", "leaf", "hubB", time.Second) // silent from 1 s: its deadline is 4 s
		f.signal("hubB", "hub", 1500*time.Millisecond)   // down at 11.5 s; silent since c1's last signal (1 s of slack)
		require.Empty(t, f.at(4*time.Second+5*time.Millisecond), "both leaves wait for their hub's verdict")

		require.Equal(t, []string{"c2 suppressed 0", "hubA interrupted 0"}, f.at(10*time.Second+5*time.Millisecond),
			"hubA's verdict suppresses only the child it still has")
		d, _, err := f.Store.Device(context.Background(), "c1")
		require.NoError(t, err)
		require.Equal(t, "hubB", d.Parent)
		require.Equal(t, deadline.HoldNone, d.Incident.Hold, "c1 still waits for hubB")

		var got []string
		for _, e := range f.step(11500*time.Millisecond + 5*time.Millisecond) {
			got = append(got, fmt.Sprintf("%s %s parent=%s", e.DeviceID, e.Kind, e.Parent))
		}
		require.ElementsMatch(t, []string{"hubB interrupted parent=", "c1 suppressed parent=hubB"}, got)
	})
}
