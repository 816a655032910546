package alarm

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// A device already reported `late` that then reports a failure, or that its broker reports offline, is
// interrupted at once with the cause, not at its timeout without one; its repeats and its recovery carry
// the failure's deadline, so one incident runs late → interrupted → alarm → recovered.
func TestFailureOfALateDeviceInterruptsAtOnce(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		f.policies.Store(parsePolicies(t, `
types:
  default: {timeout: 10s, repeat_every: 1m}
  fridge:  {timeout: 30s, warn_after: 10s, repeat_every: 1m}
`))
		require.NoError(t, f.Store.Load(ctx, f.policies.Load().Names()...))
		f.signal("door", "fridge", 0)
		f.signal("plug", "fridge", 0)
		require.Equal(t, []string{"door late 0", "plug late 0"}, f.at(10*time.Second+5*time.Millisecond))

		failedAt, offlineAt := f.T0.Add(12*time.Second), f.T0.Add(13*time.Second)
		res, err := f.Store.MarkEarlier(ctx, []deadline.Mark{
			{Device: "door", At: failedAt, Deadline: failedAt, Cause: deadline.CauseReported, Reason: "door open", Own: true},
			{Device: "plug", At: offlineAt, Deadline: offlineAt, Cause: deadline.CauseOffline}})
		require.NoError(t, err)
		require.Equal(t, []deadline.MarkResult{deadline.MarkMoved, deadline.MarkMoved}, res)

		require.Equal(t, []string{"door interrupted 0", "plug interrupted 0"}, f.at(13*time.Second+5*time.Millisecond),
			"interrupted at the word, 17 s before the timeout")
		door := eventsOf(t, f, "door", 4)
		require.Len(t, door, 2)
		in := door[1]
		require.Equal(t, event.Interrupted, in.Kind)
		require.Equal(t, event.CauseReported, in.Cause)
		require.Equal(t, "door open", in.Reason)
		require.Equal(t, failedAt.UTC(), in.Deadline)
		require.Equal(t, failedAt.UTC(), in.LastSeen, "the failure is the device's last word")
		plug := eventsOf(t, f, "plug", 4)
		require.Len(t, plug, 2)
		require.Equal(t, event.CauseOffline, plug[1].Cause)
		require.Equal(t, offlineAt.UTC(), plug[1].Deadline)
		require.Equal(t, f.T0.UTC(), plug[1].LastSeen, "its last signal, as the broker's word is not the device's")

		require.Empty(t, f.at(43*time.Second), "nothing at the old timeout")
		require.Equal(t, []string{"door alarm 1", "plug alarm 1"}, f.at(73*time.Second+5*time.Millisecond))
		f.signal("door", "fridge", 80*time.Second)
		require.Equal(t, []string{"door recovered 0"}, f.at(80*time.Second+5*time.Millisecond))
		door = eventsOf(t, f, "door", 9)
		require.Len(t, door, 4)
		for _, e := range door[1:] {
			require.Equal(t, failedAt.UTC(), e.Deadline, "%s carries the failure's deadline", e.Kind)
		}
		var phase event.Phase
		for _, e := range door {
			phase, err = phase.Next(e.Kind)
			require.NoError(t, err)
		}
		require.Equal(t, event.Closed, phase)
	})
}
