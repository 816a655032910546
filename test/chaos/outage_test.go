package chaos

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// TestChaosOutageAtOnce: a whole cell falls silent in one instant, with two replicas correlating by
// type (min_devices a quarter of the fleet, group_wait 3s), and the replica holding half of the
// waiting members is SIGKILLed while they wait. The outage must page once: one outage_started, and
// every member's interrupted carries its id (none untagged), none lost, none false.
func TestChaosOutageAtOnce(t *testing.T) {
	n := fleetSize(t)
	o := daemonOptions{correlation: fmt.Sprintf("{by: [device_type], min_devices: %d, window: 10s, group_wait: 3s}", max(n/4, 2))}
	s, _, a, b := twoSharing(t, nil, o)
	require.NoError(t, s.p.signal(s.silent, nil))
	silentAt := time.Now()
	awaitStats(t, b, scaled(s.n, 30*time.Second), "signals stored", func(st stats) bool {
		return st.Devices.Online+st.Devices.Interrupted >= int64(len(s.silent))
	})
	// The fault: the deadlines passed a second ago, their interruptions wait for their group.
	time.Sleep(time.Until(silentAt.Add(timeout + time.Second)))
	a.Kill(t)

	r := s.events.tallyInterrupted("outage_at_once", s.n, s.settle("outage_at_once", 30*time.Second))
	untaggedDevices := 0
	for _, id := range s.silent {
		if e, ok := s.events.firstOf(event.Interrupted, id); ok && e.OutageID == "" {
			untaggedDevices++
		}
	}
	s.events.mu.Lock()
	outages := len(s.events.outages)
	s.events.mu.Unlock()
	r.figures = append(r.figures, fmt.Sprintf("untagged=%d outage_started=%d killed=%s", untaggedDevices, outages, "replica-a"))
	report(t, r, func() string { return explainLost(b, r.lostIDs) }, b.LogTail)
	require.Equal(t, 1, outages, "one outage_started for the cell")
	require.Zero(t, untaggedDevices, "every member paged with its outage")
}
