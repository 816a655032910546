package alarm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// A deadline set under a timeout a reload has since cut (600 s, now 3 s) carries the last signal the
// store read from its type index: the events say when the device was last heard and how long it was
// silent, not deadline − the new timeout, a time after its deadline.
func TestDecideDatesAnIncidentByTheTimeoutItWasSetWith(t *testing.T) {
	lastSignal := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	dl := lastSignal.Add(600 * time.Second)
	pol := config.Policy{Timeout: 3 * time.Second}
	claim := deadline.Claim{Device: "gw", Type: "gateway", State: deadline.State{Deadline: dl.UnixMilli()}, Fresh: true,
		LastSignal: lastSignal}

	d := decide(input{Claim: claim, Policy: pol, Now: dl})
	require.Len(t, d.Events, 1)
	require.Equal(t, event.Interrupted, d.Events[0].Kind)
	require.Equal(t, lastSignal, d.Events[0].LastSeen)

	claim.State, claim.Fresh = d.Ack.State, false
	back := dl.Add(time.Minute)
	d = decide(input{Claim: claim, Policy: pol, Current: back.Add(pol.Timeout), Now: back})
	require.Len(t, d.Events, 1)
	require.Equal(t, event.Recovered, d.Events[0].Kind)
	require.Equal(t, lastSignal, d.Events[0].LastSeen)
	require.Equal(t, back.Sub(lastSignal).Milliseconds(), d.Events[0].SilentForMs)
}
