package silence

import (
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/matcher"
	"github.com/heartbeatd/heartbeatd/pkg/schedule"
)

// Facts are what matchers look at of one device.
type Facts struct {
	DeviceID   string
	DeviceType string
	Parent     string
	Labels     map[string]string
}

func (f Facts) value(label string) string {
	switch label {
	case "device_id":
		return f.DeviceID
	case "device_type":
		return f.DeviceType
	case "parent":
		return f.Parent
	}
	return f.Labels[label]
}

// compiled is a stored silence ready to be checked: its matchers compiled, its intervals resolved.
type compiled struct {
	Silence
	matchers []matcher.Compiled
	calendar *schedule.Calendar // nil: active from Starts to Ends without a break
	unknown  bool               // names an interval the configuration no longer defines: never active
	// intervals are what its names resolved to (nil where one did not): the index reuses the compiled
	// silence while they and the silence stay the same, instead of compiling its expressions every refresh.
	intervals []*schedule.Interval
	err       error
}

// resolve looks up names; nil where a name is not defined.
func resolve(names []string, intervals func(string) *schedule.Interval) []*schedule.Interval {
	if len(names) == 0 {
		return nil
	}
	out := make([]*schedule.Interval, len(names))
	for i, n := range names {
		if intervals != nil {
			out[i] = intervals(n)
		}
	}
	return out
}

// recompile is compile, or prev when it was compiled from the same silence and the same intervals.
func recompile(prev *compiled, sil Silence, intervals func(string) *schedule.Interval) (compiled, error) {
	if prev != nil && reflect.DeepEqual(prev.Silence, sil) && slices.Equal(prev.intervals, resolve(sil.TimeIntervals, intervals)) {
		return *prev, prev.err
	}
	return compile(sil, intervals)
}

// compile prepares sil; intervals resolves interval names (nil: none are defined).
func compile(sil Silence, intervals func(string) *schedule.Interval) (c compiled, err error) {
	c = compiled{Silence: sil, matchers: make([]matcher.Compiled, len(sil.Matchers)), intervals: resolve(sil.TimeIntervals, intervals)}
	defer func() { c.err = err }()
	for i, m := range sil.Matchers {
		if c.matchers[i], err = matcher.Compile(m); err != nil {
			return c, err
		}
	}
	for i, iv := range c.intervals {
		if iv == nil {
			c.unknown = true
			return c, fmt.Errorf("time_intervals: %q is not in the configuration's time_intervals", sil.TimeIntervals[i])
		}
	}
	if len(c.intervals) > 0 {
		c.calendar = schedule.NewCalendar(c.intervals, nil)
	}
	return c, nil
}

// matches reports whether the silence selects the device (its device, type and matchers, not its time).
func (c *compiled) matches(f Facts) bool {
	if c.DeviceID != "" && c.DeviceID != f.DeviceID {
		return false
	}
	if c.DeviceType != "" && c.DeviceType != f.DeviceType {
		return false
	}
	for i := range c.matchers {
		if !c.matchers[i].Matches(f.value(c.matchers[i].Label)) {
			return false
		}
	}
	return true
}

// activeUntil is when the silence stops covering now: its end, or for a recurring one the end of the
// current spell of its intervals; zero when it does not cover now.
func (c *compiled) activeUntil(now time.Time) time.Time {
	if c.unknown || c.Starts.After(now) || !c.Ends.After(now) {
		return time.Time{}
	}
	if c.calendar == nil {
		return c.Ends
	}
	until, inside := c.calendar.QuietUntil(now)
	if !inside {
		return time.Time{}
	}
	if until.After(c.Ends) {
		return c.Ends
	}
	return until
}

// validateSelection checks what a silence selects: a device, a type, matchers, or a combination, never
// everything.
func validateSelection(sil Silence, c compiled) error {
	switch {
	case sil.DeviceID != "" && sil.DeviceType != "":
		return fmt.Errorf("give device_id or device_type, not both (a matcher can narrow a type)")
	case sil.DeviceID == "" && sil.DeviceType == "" && len(sil.Matchers) == 0:
		return fmt.Errorf("give device_id, device_type or matchers")
	case len(sil.Matchers) > matcher.MaxMatchers:
		return fmt.Errorf("at most %d matchers", matcher.MaxMatchers)
	case len(sil.TimeIntervals) > matcher.MaxMatchers:
		return fmt.Errorf("at most %d time_intervals", matcher.MaxMatchers)
	}
	if sil.DeviceID == "" && sil.DeviceType == "" &&
		!slices.ContainsFunc(c.matchers, func(m matcher.Compiled) bool { return !m.Matches("") }) {
		// As in Alertmanager: a silence of matchers that all match the empty value would silence the fleet.
		return fmt.Errorf("at least one matcher must not match the empty value (%s)", matcher.Describe(sil.Matchers))
	}
	return nil
}
