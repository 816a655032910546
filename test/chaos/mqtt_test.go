package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestChaosMQTTOutage stops the MQTT broker for twice the timeout. Keepers cannot signal meanwhile, so
// their deadlines pass inside the outage: hold-back must keep them from being reported until they are
// heard again. Devices that went silent before the outage (their deadlines also pass inside it) are
// still reported once the hold-back's grace is over.
func TestChaosMQTTOutage(t *testing.T) {
	n := fleetSize(t)
	f := startFleet(t, fleetOptions{})
	hb := f.startDaemon(daemonOptions{grace: 2 * time.Second})
	p := f.publisher("devices")
	keepers := ids("keeper", max(n/2, 10))
	f.keep(keepers)
	silent := ids("silent", n)
	require.NoError(t, p.signal(silent, nil))
	// Stored before the broker goes (mosquitto here keeps no sessions across a restart).
	require.True(t, poll(scaled(n, 30*time.Second), func() bool {
		s, err := getStats(hb)
		return err == nil && s.Devices.Online >= int64(len(silent)+len(keepers))
	}), "signals not stored\n%s", hb.LogTail())

	f.broker.Stop(t)
	time.Sleep(2 * timeout) // the outage itself
	f.broker.Start(t)
	waitReady(t, hb)
	// The fault took effect: detection was held back (else the scenario proves nothing).
	require.Contains(t, hb.Log(), "detection held back")

	f.events.awaitReported(t, silent, scaled(n, 30*time.Second))
	b := f.barrier(p, "mqtt", scaled(n, 30*time.Second))
	report(t, f.events.tallyInterrupted("mqtt_outage", n, concat(silent, b)), hb.LogTail)
}
