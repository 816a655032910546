package alarm

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/matcher"
	"github.com/heartbeatd/heartbeatd/internal/silence"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// t0 is Sunday 2026-11-22 09:33:20 UTC: "break" runs from t0+100s to t0+1600s (10:00, its end).
const quietYAML = `
time_intervals:
  - name: break
    time_intervals: [{times: [{start_time: "09:35", end_time: "10:00"}]}]
  - name: opening
    time_intervals: [{times: [{start_time: "09:00", end_time: "09:34"}]}]
types:
  default: {timeout: 10s, repeat_every: 1m, max_repeats: 0, quiet: [break]}
  shop:    {timeout: 10s, repeat_every: 1m, quiet: [], active: [opening]}
  plain:   {timeout: 10s, repeat_every: 0s, quiet: []}
`

// A deadline inside a quiet interval starts no incident: a device that signals again after the
// interval is never reported, one that stays silent is reported at the interval's end + its timeout with
// its real last signal, and the event's deadline is that moved one.
func TestQuietDeadlineIsMovedToTheEndPlusTimeout(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		f.policies.Store(parsePolicies(t, quietYAML))
		require.NoError(t, f.Store.Load(context.Background(), f.policies.Load().Names()...))
		f.signal("sleeps", "", 95*time.Second) // deadline t0+105s, inside the break
		f.signal("wakes", "", 95*time.Second)
		f.signal("watched", "plain", 95*time.Second) // the same deadline, a type without intervals
		require.Equal(t, []string{"watched interrupted 0"}, f.at(106*time.Second), "quiet deadlines start no incident")

		dev, _, err := f.Store.Device(context.Background(), "sleeps")
		require.NoError(t, err)
		require.NotNil(t, dev.Incident)
		require.Equal(t, deadline.HoldQuiet, dev.Incident.Hold)
		require.Equal(t, f.T0.Add(1610*time.Second), dev.NextAct, "looked at again at the end (t0+1600s) + timeout")

		f.signal("wakes", "", 1602*time.Second) // back two seconds after the interval
		require.Empty(t, f.at(1609*time.Second))
		f.sink.Take()
		got := f.at(1610 * time.Second)
		require.Equal(t, []string{"sleeps interrupted 0"}, got, "the silent one at end + timeout; the one back after the end never")
		require.Empty(t, f.at(1611*time.Second), "wakes came back after the break: nothing, neither recovered nor interrupted")

		var interrupted event.Event
		for _, r := range f.kafka.ReadAll(t, eventsTopic, 3, 10*time.Second) {
			if e, err := event.Decode(r.Value); err == nil && e.DeviceID == "sleeps" {
				interrupted = e
			}
		}
		require.Equal(t, event.Interrupted, interrupted.Kind)
		require.Equal(t, f.T0.Add(95*time.Second).UTC(), interrupted.LastSeen, "last_seen stays the real last signal")
		require.Equal(t, f.T0.Add(1610*time.Second).UTC(), interrupted.Deadline, "deadline is the moved one")
		require.Equal(t, (1610-95)*int64(time.Second/time.Millisecond), interrupted.SilentForMs)
	})
}

// An incident open before a quiet interval keeps its state: its repeats pause inside and resume after it
// on their schedule, it never gets a second `interrupted`, and its recovery is still reported.
func TestRepeatsPauseInsideQuietAndResumeOnSchedule(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		f.policies.Store(parsePolicies(t, quietYAML))
		require.NoError(t, f.Store.Load(context.Background(), f.policies.Load().Names()...))
		f.signal("open", "", 0)
		f.signal("back", "", 0)
		require.Equal(t, []string{"back interrupted 0", "open interrupted 0"}, f.at(10*time.Second))
		require.Equal(t, []string{"back alarm 1", "open alarm 1"}, f.at(70*time.Second), "t0+70s is before the break")
		require.Empty(t, f.at(130*time.Second), "repeat 2 falls in the break: paused")
		f.signal("back", "", 500*time.Second)
		require.Equal(t, []string{"back recovered 0"}, f.at(501*time.Second), "recovery is reported inside the interval")
		require.Empty(t, f.at(1600*time.Second), "the break ended; the next repeat on the grid is t0+10s+27m")
		require.Equal(t, []string{"back interrupted 0"}, f.at(1610*time.Second),
			"silent again inside the break (deadline t0+510s): a new incident at the end + timeout")
		require.Equal(t, []string{"open alarm 2"}, f.at(1630*time.Second), "repeat 2, not a second interrupted")
		require.Equal(t, []string{"back alarm 1"}, f.at(1680*time.Second), "the new incident repeats from its own interruption")
		require.Equal(t, []string{"open alarm 3"}, f.at(1690*time.Second), "and the old one on its grid after the break")
	})
}

// Outside every active interval counts as quiet: a shop terminal that falls silent after opening hours is
// reported the next day at opening + timeout, one silent during them at once.
func TestActiveIntervalsWatchOnlyInside(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		f.policies.Store(parsePolicies(t, quietYAML))
		require.NoError(t, f.Store.Load(context.Background(), f.policies.Load().Names()...))
		f.signal("early", "shop", 0)             // deadline 09:33:30, inside opening
		f.signal("late", "shop", 45*time.Second) // deadline 09:34:15, after it
		require.Equal(t, []string{"early interrupted 0"}, f.at(time.Minute))
		require.Empty(t, f.at(2*time.Minute), "early's repeat falls after opening hours: paused")
		nextOpening := 24*time.Hour - 33*time.Minute - 20*time.Second // 09:00 the next day
		require.Empty(t, f.at(nextOpening+9*time.Second))
		require.Equal(t, []string{"late interrupted 0"}, f.at(nextOpening+10*time.Second))
		require.Empty(t, f.at(nextOpening+29*time.Second))
		require.Equal(t, []string{"early alarm 1"}, f.at(nextOpening+30*time.Second),
			"resumed on its grid: repeats are timed from the interruption (t0+10s) every minute")
	})
}

// A silence of matchers on labels covers exactly the registered devices it selects: the handler reads
// their labels and parents while such a silence exists.
func TestLabelMatcherSilenceDefersOnlyTheSelected(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		sil := f.withActs()
		_, _, err := f.Store.Register(ctx, []string{"ber-1", "muc-1"}, []deadline.Registration{
			{Labels: map[string]string{"site": "berlin"}}, {Labels: map[string]string{"site": "munich"}}}, []string{"", ""})
		require.NoError(t, err)
		_, err = sil.Create(ctx, silence.Silence{Ends: f.T0.Add(time.Hour), Matchers: []matcher.Matcher{{Label: "site", Op: "=~", Value: "ber.*"}}})
		require.NoError(t, err)
		f.sink.Take() // silenced
		f.signal("ber-1", "", 0)
		f.signal("muc-1", "", 0)
		require.Equal(t, []string{"muc-1 interrupted 0"}, f.at(10*time.Second))
		require.Contains(t, f.at(time.Hour), "ber-1 interrupted 0", "the silenced one when the silence ends")
	})
}
