package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestChaosKillDuringExpiry SIGKILLs heartbeatd while a mass expiry is being published and starts it
// again: the claims it held are delivered again after their lease, so every silent device is reported
// (duplicates allowed, counted), and the keepers, signalling throughout, never are.
func TestChaosKillDuringExpiry(t *testing.T) {
	s := startScenario(t, daemonOptions{})
	s.keepers(10)

	sent := paced(s.p, s.silent, timeout)
	s.awaitQuarter()
	s.hb.Kill(t)
	s.hb.Start(t)
	require.NoError(t, <-sent)
	s.finish("kill_during_expiry", "kill", 30*time.Second)
}
