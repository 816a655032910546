package alarm

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// A repeat claimed by a replica that stalls before publishing stays that replica's while its lease runs:
// the device's signal must not make the claimed entry due for another replica, whose `recovered` would
// then go out before the stalled replica's `alarm`. The holder reports the recovery itself.
func TestSignalDuringAClaimedRepeatLeavesItToItsHolder(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		f.signal("d1", "", 0) // default: timeout 10s, repeat 1m
		require.Equal(t, []string{"d1 interrupted 0"}, f.at(10*time.Second+time.Millisecond))
		held := f.claimOnly(70*time.Second + time.Millisecond)
		require.Len(t, held, 1, "the first repeat, claimed by a replica that stalls")

		f.signal("d1", "", 70*time.Second+2*time.Millisecond)
		require.Empty(t, f.at(70*time.Second+3*time.Millisecond), "the signal leaves the held claim to its holder")
		require.NoError(t, f.handler.Handle(context.Background(), held))
		require.Equal(t, []string{"d1 recovered 0"}, ids(f.sink.Take()), "the holder wakes and sees the signal")
		f.signal("d1", "", 95*time.Second)
		require.Empty(t, f.at(100*time.Second+4*time.Millisecond), "past the lease: nothing handed out again")
	})
}

// The same for a claim that replaces an older incident: its interruption is leased to its claimer, so a
// signal right after the claim waits for that claimer's `interrupted` before anyone reports `recovered`.
func TestSignalDuringAReplacingClaimLeavesItToItsHolder(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		f.signal("d1", "", 0)
		require.Equal(t, []string{"d1 interrupted 0"}, f.at(10*time.Second+time.Millisecond))
		f.signal("d1", "", 20*time.Second) // its recovery not yet reported when it falls silent again
		held := f.claimOnly(30*time.Second + time.Millisecond)
		require.Len(t, held, 1, "the new incident, claimed by a replica that stalls")

		f.signal("d1", "", 30*time.Second+2*time.Millisecond)
		require.Empty(t, f.at(30*time.Second+3*time.Millisecond), "the signal leaves the held claim to its holder")
		require.NoError(t, f.handler.Handle(context.Background(), held))
		first, second := f.T0.Add(10*time.Second), f.T0.Add(30*time.Second)
		require.Equal(t, []string{"recovered " + first.String(), "interrupted " + second.String()}, kindsAndDeadlines(f.sink.Take()),
			"the holder closes the first incident and opens the second")
		require.Equal(t, []string{"recovered " + second.String()}, kindsAndDeadlines(f.step(30*time.Second+4*time.Millisecond)),
			"its acknowledgement saw the signal: the second incident's recovery is due at once")
	})
}

func kindsAndDeadlines(events []event.Event) []string {
	out := make([]string, 0, len(events))
	for _, e := range events {
		out = append(out, string(e.Kind)+" "+e.Deadline.UTC().String())
	}
	return out
}
