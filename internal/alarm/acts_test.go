package alarm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// TestAckedEventNamesTheRecordedLastSignal: a deadline written under an earlier, longer timeout cannot
// tell the last signal by the policy in force (it would be deadline − new timeout, after the real one);
// the acked event carries the recorded one then.
func TestAckedEventNamesTheRecordedLastSignal(t *testing.T) {
	now := time.UnixMilli(1_763_800_000_000)
	signal := now.Add(-time.Minute)
	incident := deadline.State{Deadline: signal.Add(10 * time.Minute).UnixMilli()} // set under a 10 min timeout
	pol := config.Policy{Timeout: 3 * time.Second}                                 // cut to 3 s since
	byPolicy := AckedEvent("d", "meter", incident, pol, time.Time{}, event.Act{By: "op"}, now)
	require.True(t, byPolicy.LastSeen.After(signal), "the policy alone dates it after the real signal")
	e := AckedEvent("d", "meter", incident, pol, signal, event.Act{By: "op"}, now)
	require.True(t, signal.Equal(e.LastSeen), "last_seen %v, want %v", e.LastSeen, signal)
	require.Equal(t, byPolicy.ID, e.ID, "the same incident's ack keeps its id")
}
