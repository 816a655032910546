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
	n := fleetSize(t)
	f := startFleet(t, fleetOptions{})
	hb := f.startDaemon(daemonOptions{})
	p := f.publisher("devices")
	silent := ids("silent", n)
	f.keep(ids("keeper", max(n/10, 10)))

	sent := p.paced(silent, timeout)
	// A quarter reported: the expiry is under way, with claims in flight.
	require.True(t, poll(scaled(n, 30*time.Second), func() bool { return f.events.reported(silent) >= len(silent)/4 }),
		"expiry never got going\n%s", hb.LogTail())
	hb.Kill(t)
	hb.Start(t)
	require.NoError(t, <-sent)

	f.events.awaitReported(t, silent, scaled(n, 30*time.Second))
	b := f.barrier(p, "kill", scaled(n, 30*time.Second))
	report(t, f.events.tallyInterrupted("kill_during_expiry", n, concat(silent, b)), hb.LogTail)
}
