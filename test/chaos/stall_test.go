package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestChaosStall freezes heartbeatd with SIGSTOP for twice the timeout (a VM freeze, a long pause) while
// the keepers go on signalling over MQTT, then resumes it with SIGCONT. The keepers' signals wait at the
// broker meanwhile, so their deadlines pass inside the stall, and the scanner wakes up before the backlog
// is stored: the stall is a blind window of heartbeatd's own, and none of them may be reported. Devices
// that fell silent just before the stall (deadlines inside it too) are reported once its grace passed.
func TestChaosStall(t *testing.T) {
	s := startScenario(t, daemonOptions{})
	keepers := s.keepers(2)
	require.NoError(t, s.p.signal(s.silent, nil))
	s.awaitStored(keepers)

	freeze(t, s.hb.PID(), 2*timeout, nil) // the stall itself
	s.finish("stall", "stall", 30*time.Second)
	// The fault took effect: heartbeatd noticed its own stall and held detection back over it.
	log := s.hb.Log()
	require.Contains(t, log, "heartbeatd stalled")
	require.Contains(t, log, "detection held back")
}
