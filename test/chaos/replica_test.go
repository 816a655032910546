package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// TestChaosReplicaFailover runs two replicas on one Redis and Kafka and SIGKILLs one while deadlines are
// passing: the survivor takes over its slots and claims it held, so every silent device is reported, and
// no keeper is.
func TestChaosReplicaFailover(t *testing.T) {
	n := fleetSize(t)
	f := startFleet(t, fleetOptions{})
	a := f.startDaemon(daemonOptions{replica: "replica-a"})
	b := f.startDaemon(daemonOptions{replica: "replica-b"})
	owns := func(hb *testenv.Heartbeatd) bool {
		s, err := getStats(hb)
		if err != nil {
			return false
		}
		switch v := s.OwnedSlots.(type) {
		case float64:
			return v > 0
		case []any:
			return len(v) > 0
		}
		return false
	}
	// Both scan: the victim holds slots (and so claims) when it dies.
	require.True(t, poll(30*time.Second, func() bool { return owns(a) && owns(b) }), "slots not shared\n%s\n%s", a.LogTail(), b.LogTail())

	p := f.publisher("devices")
	silent := ids("silent", n)
	f.keep(ids("keeper", max(n/10, 10)))
	sent := p.paced(silent, timeout)
	require.True(t, poll(scaled(n, 30*time.Second), func() bool { return f.events.reported(silent) >= len(silent)/4 }),
		"expiry never got going\n%s", a.LogTail())
	a.Kill(t)
	require.NoError(t, <-sent)

	f.events.awaitReported(t, silent, scaled(n, 30*time.Second))
	bar := f.barrier(p, "failover", scaled(n, 30*time.Second))
	require.True(t, owns(b))
	report(t, f.events.tallyInterrupted("replica_failover", n, concat(silent, bar)), b.LogTail)
}
