package alarm

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// signalAll signals devices prefix0…prefix(n-1) of typ at d.
func (f *fixture) signalAll(prefix string, n int, typ string, d time.Duration) {
	for i := range n {
		f.signal(fmt.Sprintf("%s%d", prefix, i), typ, d)
	}
}

// untagged are the interrupted events without an outage id: what a consumer pages on.
func untagged(events []event.Event) int {
	n := 0
	for _, e := range events {
		if e.Kind == event.Interrupted && e.OutageID == "" {
			n++
		}
	}
	return n
}

// TestOutageThresholdJudgedInline: gateways falling silent over several wake-ups page at most
// min_devices − 1 times: the wake-up whose interruptions reach the threshold opens the outage itself,
// publishes outage_started before its members, and every member from then on carries the outage's id.
func TestOutageThresholdJudgedInline(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		withCorrelation(t, f, 0, nil)
		f.signalAll("a", 4, "gateway", 0)
		f.signalAll("b", 3, "gateway", time.Second)
		f.signalAll("c", 2, "gateway", 2*time.Second)

		first := f.step(5*time.Second + 5*time.Millisecond)
		require.Len(t, first, 4)
		require.Equal(t, 4, untagged(first), "below the threshold: paged as they are")

		second := f.step(6*time.Second + 5*time.Millisecond)
		require.Len(t, second, 4)
		require.Equal(t, event.OutageStarted, second[0].Kind, "outage_started before any later member")
		require.Equal(t, 7, second[0].Count)
		for _, e := range second[1:] {
			require.Equal(t, second[0].OutageID, e.OutageID, "%s carries the outage id", e.DeviceID)
		}
		third := f.step(7*time.Second + 5*time.Millisecond)
		require.Len(t, third, 2, "announced once")
		require.Zero(t, untagged(third))
	})
}

// TestGroupWaitHoldsUntilTheOutageForms: with group_wait, interruptions below the threshold wait; when
// later ones reach it, outage_started goes out and the held ones follow tagged once their wait is over,
// so an outage that strikes within group_wait pages once. A lone interruption goes out untagged when its
// wait is over. The wait is kept in Redis: a fresh handler (another replica) carries it on.
func TestGroupWaitHoldsUntilTheOutageForms(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		withCorrelation(t, f, 3*time.Second, nil)
		f.signalAll("a", 4, "gateway", 0)
		f.signalAll("b", 1, "gateway", time.Second)
		f.signal("lone", "sensor", -14*time.Second) // timeout 20s: deadline t0+6s, alone in its group

		require.Empty(t, f.step(5*time.Second+5*time.Millisecond), "4 gateways wait for their group")
		withCorrelation(t, f, 3*time.Second, nil) // another replica's handler from here on
		formed := f.step(6*time.Second + 5*time.Millisecond)
		require.Len(t, formed, 2, "outage_started and the member that made it; the lone sensor waits")
		require.Equal(t, event.OutageStarted, formed[0].Kind)
		require.Equal(t, []any{event.Interrupted, "b0", formed[0].OutageID}, []any{formed[1].Kind, formed[1].DeviceID, formed[1].OutageID})

		held := f.step(8*time.Second + 10*time.Millisecond)
		require.Len(t, held, 4, "the held gateways, after their wait")
		require.Zero(t, untagged(held), "tagged with the outage that formed while they waited")

		lone := f.step(9*time.Second + 10*time.Millisecond)
		require.Len(t, lone, 1)
		require.Equal(t, []any{"lone", event.Interrupted, ""}, []any{lone[0].DeviceID, lone[0].Kind, lone[0].OutageID})
		require.Equal(t, f.T0.Add(6*time.Second).UnixMilli(), lone[0].Deadline.UnixMilli())
		require.Equal(t, 3*time.Second, lone[0].At.Sub(lone[0].Deadline).Truncate(time.Second), "at most group_wait late")
	})
}
