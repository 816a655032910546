package silence

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/timeinterval"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/heartbeatd/heartbeatd/internal/matcher"
	"github.com/heartbeatd/heartbeatd/pkg/client"
	"github.com/heartbeatd/heartbeatd/pkg/schedule"
)

// nightly resolves "night" (22:00–06:00 UTC), as the configuration's time_intervals would.
func nightly(t *testing.T) func(string) *schedule.Interval {
	var ranges []timeinterval.TimeInterval
	require.NoError(t, yaml.Unmarshal([]byte(`[{times: [{start_time: "22:00", end_time: "24:00"}, {start_time: "00:00", end_time: "06:00"}]}]`), &ranges))
	return func(name string) *schedule.Interval {
		if name == "night" {
			return &schedule.Interval{Name: name, Ranges: ranges}
		}
		return nil
	}
}

// Matchers select devices by labels, parent, type and id with Alertmanager's four ops; a regular
// expression matches the whole value.
func TestMatcherSilencesSelectByLabelsAndParent(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := New(f.RDB, Options{Now: f.Clock.Now})
		_, err := s.Create(ctx, Silence{DeviceType: "gateway", Ends: endsIn(f, time.Hour),
			Matchers: []matcher.Matcher{{Label: "site", Op: "=~", Value: "ber.*"}, {Label: "parent", Op: "!=", Value: "core-1"}}})
		require.NoError(t, err)
		_, err = s.Create(ctx, Silence{Ends: endsIn(f, 2*time.Hour), Matchers: []matcher.Matcher{{Label: "device_id", Op: "!~", Value: "keep-.*"}, {Label: "tier", Op: "=", Value: "lab"}}})
		require.NoError(t, err)
		require.True(t, s.NeedsFacts(), "a label matcher needs the devices' labels")

		now := f.Clock.Now()
		cases := []struct {
			f    Facts
			want time.Duration
		}{
			{Facts{DeviceID: "g1", DeviceType: "gateway", Labels: map[string]string{"site": "berlin"}}, time.Hour},
			{Facts{DeviceID: "g2", DeviceType: "gateway", Labels: map[string]string{"site": "ber"}}, time.Hour},
			{Facts{DeviceID: "g3", DeviceType: "gateway", Labels: map[string]string{"site": "oberhausen"}}, 0}, // anchored
			{Facts{DeviceID: "g4", DeviceType: "gateway", Parent: "core-1", Labels: map[string]string{"site": "berlin"}}, 0},
			{Facts{DeviceID: "s1", DeviceType: "default", Labels: map[string]string{"site": "berlin"}}, 0},
			{Facts{DeviceID: "lab-1", Labels: map[string]string{"tier": "lab"}}, 2 * time.Hour},
			{Facts{DeviceID: "keep-1", Labels: map[string]string{"tier": "lab"}}, 0},
		}
		for _, c := range cases {
			got := s.SilencedUntilFacts(c.f, now)
			if c.want == 0 {
				require.True(t, got.IsZero(), "%+v silenced until %v", c.f, got)
			} else {
				require.Equal(t, now.Add(c.want).UTC().Truncate(time.Millisecond), got, "%+v", c.f)
			}
		}
	})
}

// endsIn is the Ends of a silence lasting d from the fixture's now.
func endsIn(f *fixture, d time.Duration) (ends time.Time) { return f.Clock.Now().Add(d) }

// A recurring silence covers its devices only inside its intervals, each time until the interval's end,
// and lasts until deleted; a name the configuration does not define is refused.
func TestRecurringSilenceFollowsItsIntervals(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := New(f.RDB, Options{Now: f.Clock.Now, Intervals: nightly(t)})
		sil, err := s.Create(ctx, Silence{DeviceType: "gateway", TimeIntervals: []string{"night"}})
		require.NoError(t, err)
		require.Equal(t, client.RecurringEnds, sil.Ends, "lasts until deleted")

		day := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC) // the day after t0, when it was created
		for _, c := range []struct {
			at, until time.Time
		}{
			{day.Add(12 * time.Hour), time.Time{}},
			{day.Add(23 * time.Hour), day.Add(30 * time.Hour)}, // 06:00 the next day
			{day.Add(5*time.Hour + 59*time.Minute), day.Add(6 * time.Hour)},
			{day.Add(6 * time.Hour), time.Time{}},
			{day.AddDate(0, 1, 0).Add(22 * time.Hour), day.AddDate(0, 1, 1).Add(6 * time.Hour)}, // every night
		} {
			require.Equal(t, c.until, s.SilencedUntil("gw", "gateway", c.at), "at %v", c.at)
		}
		require.True(t, s.SilencedUntil("other", "default", day.Add(23*time.Hour)).IsZero())

		for _, bad := range []struct {
			sil  Silence
			want string
		}{
			{Silence{DeviceType: "gateway", TimeIntervals: []string{"nigth"}}, `"nigth" is not in the configuration's time_intervals`},
			{Silence{Matchers: []matcher.Matcher{{Label: "site", Op: "!=", Value: "x"}}, Ends: endsIn(f, time.Hour)}, "at least one matcher must not match the empty value"},
			{Silence{Matchers: []matcher.Matcher{{Label: "site", Op: "=~", Value: "ber("}}, Ends: endsIn(f, time.Hour)}, "missing closing )"},
			{Silence{Matchers: []matcher.Matcher{{Label: "site", Op: "==", Value: "x"}}, Ends: endsIn(f, time.Hour)}, `op "==" is not one of`},
			{Silence{DeviceID: "a", DeviceType: "b", Ends: endsIn(f, time.Hour)}, "not both"},
		} {
			_, err := s.Create(ctx, bad.sil)
			require.True(t, errors.Is(err, ErrInvalid) && strings.Contains(err.Error(), bad.want), "%+v: %v", bad.sil, err)
		}
	})
}

// A reload that changes an interval applies to the recurring silences naming it at the next refresh of
// the index, although their compiled form is otherwise kept from one refresh to the next.
func TestRecurringSilenceFollowsAReloadedInterval(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		var current atomic.Pointer[schedule.Interval]
		current.Store(nightly(t)("night"))
		s := New(f.RDB, Options{Now: f.Clock.Now, Intervals: func(name string) *schedule.Interval {
			if name == "night" {
				return current.Load()
			}
			return nil
		}})
		_, err := s.Create(ctx, Silence{DeviceType: "gateway", TimeIntervals: []string{"night"}})
		require.NoError(t, err)
		day := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
		require.NoError(t, s.Load(ctx))
		require.Equal(t, day.Add(30*time.Hour), s.SilencedUntil("gw", "gateway", day.Add(23*time.Hour)))

		var evening []timeinterval.TimeInterval
		require.NoError(t, yaml.Unmarshal([]byte(`[{times: [{start_time: "20:00", end_time: "21:00"}]}]`), &evening))
		current.Store(&schedule.Interval{Name: "night", Ranges: evening}) // the reload
		require.NoError(t, s.Load(ctx))
		require.True(t, s.SilencedUntil("gw", "gateway", day.Add(23*time.Hour)).IsZero(), "23:00 is outside the reloaded interval")
		require.Equal(t, day.Add(21*time.Hour), s.SilencedUntil("gw", "gateway", day.Add(20*time.Hour+30*time.Minute)))
	})
}
