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
	f := startFleet(t)
	a := f.startDaemon(daemonOptions{replica: "replica-a"})
	b := f.startDaemon(daemonOptions{replica: "replica-b"})
	owns := func(hb *testenv.Heartbeatd) bool {
		s, err := getStats(hb)
		return err == nil && len(s.OwnedSlots) > 0
	}
	// Both scan: the victim holds slots (and so claims) when it dies.
	require.True(t, poll(30*time.Second, func() bool { return owns(a) && owns(b) }), "slots not shared\n%s\n%s", a.LogTail(), b.LogTail())

	// The survivor's log goes with a failure.
	s := &scenario{fleet: f, n: n, hb: b, p: f.publisher("devices"), silent: ids("silent", n)}
	s.keepers(10)
	sent := paced(s.p, s.silent, timeout)
	s.awaitQuarter()
	a.Kill(t)
	require.NoError(t, <-sent)
	s.finish("replica_failover", "failover", 30*time.Second)
	require.True(t, owns(b))
}
