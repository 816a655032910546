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
	s := startScenario(t, daemonOptions{grace: 2 * time.Second})
	keepers := s.keepers(2)
	require.NoError(t, s.p.signal(s.silent, nil))
	// Stored before the broker goes (mosquitto here keeps no sessions across a restart).
	s.awaitStored(keepers)

	s.broker.Stop(t)
	time.Sleep(2 * timeout) // the outage itself
	s.broker.Start(t)
	waitReady(t, s.hb)
	// The fault took effect: detection was held back (else the scenario proves nothing).
	require.Contains(t, s.hb.Log(), "detection held back")
	s.finish("mqtt_outage", "mqtt", 30*time.Second)
}

// TestChaosMQTTFrozen freezes the MQTT broker with SIGSTOP for three timeouts while keepers signal and
// devices expire. Unlike a stopped broker nothing closes: heartbeatd's connection stays up and simply
// delivers nothing, as if every device had fallen silent at once, until a keep-alive goes unanswered (up
// to 40 s). heartbeatd's probe through the broker notices within max_lag: no keeper may be reported.
func TestChaosMQTTFrozen(t *testing.T) {
	s := startScenario(t, daemonOptions{})
	s.keepers(2)
	sent := paced(s.p, s.silent, timeout)
	s.firstInterruption()
	freeze(t, s.broker.PID(), 3*timeout, nil)
	require.NoError(t, <-sent)
	waitReady(t, s.hb)
	// The fault took effect: heartbeatd noticed the broker delivered nothing (its probe did not come back).
	require.Contains(t, s.hb.Log(), "no probe came back from the broker")
	s.finish("mqtt_frozen", "mqtt", 30*time.Second)
}
