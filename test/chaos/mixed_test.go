package chaos

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// A mixed fleet holds a type that reports every two hours (meters) beside devices with a 2s timeout.
// After a blind window each device is watched again after its own timeout of visible time, so the 2s
// devices that fell silent in the window are reported seconds after it, not after the meters' two hours
// (bounded by detection.max_hold_back, 10m): these scenarios fail if any of them waits for the meters.

// meterTimeout is the meters' timeout: far longer than any scenario.
const meterTimeout = 2 * time.Hour

// mixedFleet is o with the meter type and no grace_after_outage.
func mixedFleet(o daemonOptions) daemonOptions {
	o.types = map[string]time.Duration{"meter": meterTimeout}
	o.ownGrace = true
	return o
}

// meters signals a few meters once through p: the devices the windows hold for two hours.
func (f *fleet) meters(p signaller) []string {
	f.t.Helper()
	m := ids("meter", 20)
	require.NoError(f.t, p.signal(m, func(string) []byte { return []byte(`{"type":"meter"}`) }))
	return m
}

// longestAfter is the longest time, over devices reported, from from(their event) to the event's own
// time.
func (c *collector) longestAfter(devices []string, from func(event.Event) time.Time) time.Duration {
	var longest time.Duration
	for _, id := range devices {
		if e, ok := c.firstOf(event.Interrupted, id); ok {
			longest = max(longest, e.At.Sub(from(e)))
		}
	}
	return longest
}

// finishMixed is finish, with the time from the window's end (windowEnd, or the first moment the test
// knows it was over) to the last silent device's report as a figure; that must stay within the devices'
// own timeout and a few seconds, far below the meters' hold.
func (s *scenario) finishMixed(name string, windowEnd time.Time, hb *testenv.Heartbeatd) {
	s.t.Helper()
	r := s.events.tallyInterrupted(name, s.n, s.settle(name, 30*time.Second))
	after := s.events.longestAfter(s.silent, func(event.Event) time.Time { return windowEnd })
	r.figures = append(r.figures, fmt.Sprintf("last_report_after_window=%s", after.Round(time.Millisecond)))
	report(s.t, r, func() string { return explainLost(hb, r.lostIDs) }, hb.LogTail)
	// A loaded 2-core machine adds seconds; the meters' hold would add ten minutes.
	require.Less(s.t, after, timeout+15*time.Second, "the 2s devices waited for the meters")
}

// TestChaosMixedFleetStall freezes heartbeatd (SIGSTOP) for twice the timeout while keepers signal, with
// meters in the fleet: the devices that fell silent before the stall are reported a timeout after it,
// and /v1/stats shows the meters still held with their own grace.
func TestChaosMixedFleetStall(t *testing.T) {
	s := startScenario(t, mixedFleet(daemonOptions{}))
	s.meters(s.p)
	keepers := s.keepers(2)
	require.NoError(t, s.p.signal(s.silent, nil))
	s.awaitStored(keepers)

	freeze(t, s.hb.PID(), 2*timeout, nil) // the stall itself
	resumed := time.Now()
	s.finishMixed("mixed_fleet_stall", resumed, s.hb)
	awaitStats(t, s.hb, 10*time.Second, "the meters held for their own timeout", func(st stats) bool {
		return st.HoldBack.ByType["meter"].Grace == meterTimeout.String()
	})
	require.Contains(t, s.hb.Log(), "grace_by_type")
}

// TestChaosMixedFleetReplicaKill: two replicas in one Kafka consumer group with meters in the fleet;
// one is SIGKILLed during a mass expiry. The dead member's partitions are held until the group has read
// them past its last word, and not a grace longer: Kafka kept every record.
func TestChaosMixedFleetReplicaKill(t *testing.T) {
	overKafka := func(f *fleet) signaller { return f.kafkaSignaller() }
	s, keepVia, a, b := twoSharing(t, overKafka, mixedFleet(daemonOptions{kafkaIngest: true, kafkaGroup: "chaos-mixed"}))
	s.meters(keepVia)
	s.keepersVia(keepVia, 10)
	sent := paced(s.p, s.silent, timeout)
	s.awaitQuarter()
	a.Kill(t)
	killed := time.Now()
	require.NoError(t, <-sent)
	// The window ends when the coordinator has expelled the dead member (session_timeout 6s) and the
	// group has read its partitions.
	s.finishMixed("mixed_fleet_replica_kill", killed.Add(6*time.Second), b)
	require.Contains(t, b.Log(), "nothing was lost in it: no grace")
}

// TestChaosMixedFleetRebalance: one replica reads a Kafka topic alone while devices expire over ten
// seconds, with meters in the fleet; a second joins its consumer group in the middle, and the rebalance
// blinds the group until every partition is read past it. Nothing was lost, so the devices whose
// deadlines passed in the rebalance are reported as soon as it is read past, and no keeper is.
func TestChaosMixedFleetRebalance(t *testing.T) {
	f := startFleet(t)
	o := mixedFleet(daemonOptions{kafkaIngest: true, kafkaGroup: "chaos-rebalance"})
	o.replica = "replica-a"
	a := f.startDaemon(o)
	s := &scenario{fleet: f, n: fleetSize(t), hb: a, silent: ids("silent", fleetSize(t)), p: f.kafkaSignaller()}
	keepVia := f.kafkaSignaller()
	s.meters(keepVia)
	s.keepersVia(keepVia, 10)
	sent := paced(s.p, s.silent, 5*timeout)
	s.firstInterruption()
	o.replica = "replica-b"
	aBefore := len(a.Log())
	b := f.launchDaemon(o, testenv.HeartbeatdOptions{})
	require.NoError(t, <-sent)
	waitReady(t, b)
	r := s.events.tallyInterrupted("mixed_fleet_rebalance", s.n, s.settle("mixed_fleet_rebalance", 30*time.Second))
	late := s.events.longestAfter(s.silent, func(e event.Event) time.Time { return e.Deadline })
	r.figures = append(r.figures, fmt.Sprintf("lateness_max=%s", late.Round(time.Millisecond)))
	report(t, r, func() string { return explainLost(a, r.lostIDs) }, a.LogTail, b.LogTail)
	require.Less(t, late, timeout+15*time.Second, "the 2s devices waited for the meters")
	require.Contains(t, b.Log(), "joined the consumer group", "replica-b joined: the group rebalanced")
	// replica-a held back for it: as a rebalance, or as the lag of the partitions it blinded, whichever
	// of the two causes began first names the window.
	require.Regexp(t, `rebalancing|kafka: lagging`, a.Log()[aBefore:])
}
