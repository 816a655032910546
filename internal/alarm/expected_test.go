package alarm

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// t0 is 09:33:20 UTC: the meter is expected every ten minutes, with a minute's grace.
const expectedYAML = `
types:
  default: {timeout: 10s, repeat_every: 0s}
  meter:   {schedule: "*/10 * * * *", grace: 1m, repeat_every: 0s}
  tight:   {schedule: "*/10 * * * *", repeat_every: 0s}
`

// eventsOf decodes the events Kafka holds for device, in order.
func eventsOf(t *testing.T, f *fixture, device string, n int) []event.Event {
	t.Helper()
	var out []event.Event
	for _, r := range f.kafka.ReadAll(t, eventsTopic, n, 10*time.Second) {
		if e, err := event.Decode(r.Value); err == nil && e.DeviceID == device {
			out = append(out, e)
		}
	}
	return out
}

// A signal of a type with expected times sets the deadline to the next occurrence + grace, on every
// refresh path (typed, untyped from the store's memory, untyped through the script), and the events keep
// the true last signal and silence length.
func TestExpectedTimesSetTheDeadline(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		f.policies.Store(parsePolicies(t, expectedYAML))
		require.NoError(t, f.Store.Load(ctx, f.policies.Load().Names()...))
		f.signal("m1", "meter", 0) // 09:33:20 → expected 09:40, due 09:41 = t0+460s
		f.signal("d1", "", 0)      // the default type keeps its timeout
		dev, _, err := f.Store.Device(ctx, "m1")
		require.NoError(t, err)
		require.Equal(t, f.T0.Add(460*time.Second), dev.Deadline)
		require.Equal(t, []string{"d1 interrupted 0"}, f.at(459*time.Second))
		require.Equal(t, []string{"m1 interrupted 0"}, f.at(460*time.Second))

		// Back untyped through another replica, which does not remember m1's type: the script reads it from
		// the incident and times the deadline by the schedule: 09:42:10 → 09:50 + 1m = t0+1060s.
		other, err := deadline.New(f.RDB, deadline.Options{Slots: 8, Now: f.Clock.Now, Timeout: func(string) time.Duration { return 10 * time.Second },
			Expected: func(typ string, seen time.Time) (time.Time, bool) { return f.policies.Load().Expected(typ, seen) }})
		require.NoError(t, err)
		require.NoError(t, other.Load(ctx, f.policies.Load().Names()...))
		f.Clock.Set(f.T0.Add(530 * time.Second))
		require.NoError(t, other.Refresh(ctx, []deadline.Signal{{Device: "m1", Seen: f.T0.Add(530 * time.Second)}}))
		require.Equal(t, []string{"m1 recovered 0"}, f.at(531*time.Second))
		dev, _, err = f.Store.Device(ctx, "m1")
		require.NoError(t, err)
		require.Equal(t, f.T0.Add(1060*time.Second), dev.Deadline, "untyped through the script")

		// Untyped again through this replica, which remembers the type: 09:50:30 → 10:00 + 1m = t0+1660s.
		f.signal("m1", "", 1030*time.Second)
		require.Empty(t, f.at(1659*time.Second))
		require.Equal(t, []string{"m1 interrupted 0"}, f.at(1660*time.Second))

		evs := eventsOf(t, f, "m1", 4)
		require.Len(t, evs, 3)
		require.Equal(t, f.T0.UTC(), evs[0].LastSeen, "last_seen is the signal, not deadline − a timeout")
		require.Equal(t, int64(460_000), evs[0].SilentForMs)
		require.Equal(t, event.Recovered, evs[1].Kind)
		require.Equal(t, f.T0.UTC(), evs[1].LastSeen)
		require.Equal(t, int64(530_000), evs[1].SilentForMs, "the outage: from the last signal before it to the one that ended it")
		require.Equal(t, f.T0.Add(1030*time.Second).UTC(), evs[2].LastSeen)
		require.Equal(t, f.T0.Add(1660*time.Second).UTC(), evs[2].Deadline)
	})
}

// A typed signal of a scheduled type is late when its own deadline had passed at receipt, even when that
// is sooner after the signal than any timeout (docs/signals.md): it must not report a recovery.
func TestLateSignalOfAScheduledType(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		f.policies.Store(parsePolicies(t, expectedYAML))
		require.NoError(t, f.Store.Load(ctx, f.policies.Load().Names()...))
		received := []time.Time{f.T0.Add(403 * time.Second)} // 09:40:03
		late, err := f.Store.Late(ctx, []deadline.Signal{{Device: "t1", Type: "tight", Seen: f.T0.Add(395 * time.Second)}}, received)
		require.NoError(t, err)
		require.Equal(t, []bool{true}, late, "seen 09:39:55, expected at 09:40:00 without grace, received 09:40:03")
		late, err = f.Store.Late(ctx, []deadline.Signal{{Device: "t1", Type: "meter", Seen: f.T0.Add(395 * time.Second)}}, received)
		require.NoError(t, err)
		require.Nil(t, late, "with a minute's grace it is due at 09:41")
	})
}
