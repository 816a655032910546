package config

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/alertmanager/timeinterval"

	"github.com/heartbeatd/heartbeatd/pkg/schedule"
)

// TimeInterval is one entry of time_intervals, as Alertmanager's configuration writes it: a name and
// ranges (times, weekdays, days_of_month, months, years, location) parsed by Alertmanager's own package,
// so an operator's intervals paste unchanged (docs/schedules.md).
type TimeInterval struct {
	Name          string                      `yaml:"name"`
	TimeIntervals []timeinterval.TimeInterval `yaml:"time_intervals"`
}

// intervals are the named intervals, for the calendars; a duplicate name keeps its first entry
// (validation rejects it).
func (c *Config) intervals() map[string]*schedule.Interval {
	out := make(map[string]*schedule.Interval, len(c.TimeIntervals))
	for _, ti := range c.TimeIntervals {
		if _, dup := out[ti.Name]; !dup {
			out[ti.Name] = &schedule.Interval{Name: ti.Name, Ranges: ti.TimeIntervals}
		}
	}
	return out
}

// Interval returns the named interval, for the recurring silences; nil when the configuration has none
// of that name.
func (c *Config) Interval(name string) *schedule.Interval { return c.intervals()[name] }

// IntervalNames lists the configured interval names, sorted.
func (c *Config) IntervalNames() []string {
	names := make([]string, 0, len(c.TimeIntervals))
	for _, ti := range c.TimeIntervals {
		names = append(names, ti.Name)
	}
	sort.Strings(names)
	return names
}

// withSchedules builds pol's calendar from its (resolved) interval names and its expected times from
// the type's own schedule keys. Names validation did not find are skipped: Validate reports them.
func withSchedules(pol Policy, tp TypePolicy, intervals map[string]*schedule.Interval) Policy {
	pick := func(names []string) []*schedule.Interval {
		var out []*schedule.Interval
		for _, n := range names {
			if iv := intervals[n]; iv != nil {
				out = append(out, iv)
			}
		}
		return out
	}
	pol.Calendar = schedule.NewCalendar(pick(pol.Quiet), pick(pol.Active))
	if tp.Schedule != nil {
		if e, err := tp.expected(); err == nil {
			pol.Expected = e
			pol.Timeout = e.LongestGap + e.Grace
		}
	}
	return pol
}

// expected parses the type's schedule keys.
func (tp TypePolicy) expected() (*schedule.Expected, error) {
	loc := time.UTC
	if tp.ScheduleTZ != nil {
		var err error
		if loc, err = schedule.LoadLocation(*tp.ScheduleTZ); err != nil {
			return nil, err
		}
	}
	var grace time.Duration
	if tp.Grace != nil {
		grace = *tp.Grace
	}
	return schedule.NewExpected(*tp.Schedule, loc, grace)
}

// validateSchedules checks time_intervals and every type's quiet, active and schedule keys.
func (c *Config) validateSchedules(v *validator) {
	seen := map[string]bool{}
	for i, ti := range c.TimeIntervals {
		key := fmt.Sprintf("time_intervals[%d]", i)
		switch {
		case strings.TrimSpace(ti.Name) == "":
			v.add(key+".name", "required")
		case seen[ti.Name]:
			v.add(key+".name", "%q is defined twice", ti.Name)
		}
		seen[ti.Name] = true
	}
	known := c.IntervalNames()
	names := make([]string, 0, len(c.Types))
	for name := range c.Types {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		key, tp := "types."+name, c.Types[name]
		for _, list := range []struct {
			key   string
			names []string
		}{{".quiet", tp.Quiet}, {".active", tp.Active}} {
			for _, n := range list.names {
				if !slices.Contains(known, n) {
					v.add(key+list.key, "%q is not in time_intervals (%s)", n, knownList(known))
				}
			}
		}
		c.validateSchedule(v, key, tp)
	}
}

func (c *Config) validateSchedule(v *validator, key string, tp TypePolicy) {
	if tp.Schedule == nil {
		if tp.ScheduleTZ != nil {
			v.add(key+".schedule_tz", "only with schedule")
		}
		if tp.Grace != nil {
			v.add(key+".grace", "only with schedule")
		}
		return
	}
	if tp.Timeout != nil {
		v.add(key+".timeout", "a schedule replaces the timeout: write one of them")
	}
	if tp.Grace != nil && *tp.Grace < 0 {
		v.add(key+".grace", "%s must not be negative", FormatDuration(*tp.Grace))
	}
	if tp.ScheduleTZ != nil {
		if _, err := schedule.LoadLocation(*tp.ScheduleTZ); err != nil {
			v.add(key+".schedule_tz", "%v", err)
			return
		}
	}
	if _, err := tp.expected(); err != nil {
		v.add(key+".schedule", "%v", err)
	}
}

func knownList(names []string) string {
	if len(names) == 0 {
		return "none are defined"
	}
	return "defined: " + strings.Join(names, ", ")
}

// ScheduleTable renders, for check-config, each type's quiet/active intervals and schedule with their
// next transitions after now; "" when no type has any.
func (c *Config) ScheduleTable(now time.Time) string {
	p := c.Policies()
	var b strings.Builder
	for _, name := range p.names {
		pol := p.byName[name]
		if pol.Calendar == nil && pol.Expected == nil {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("SCHEDULES (times in UTC)\n")
		}
		fmt.Fprintf(&b, "%s:\n", name)
		if len(pol.Quiet) > 0 {
			fmt.Fprintf(&b, "  quiet: %s\n", strings.Join(pol.Quiet, ", "))
		}
		if len(pol.Active) > 0 {
			fmt.Fprintf(&b, "  active: %s\n", strings.Join(pol.Active, ", "))
		}
		for _, tr := range pol.Calendar.Transitions(now, 4) {
			word := "watched again"
			if tr.Quiet {
				word = "quiet"
			}
			fmt.Fprintf(&b, "    %s  %s\n", tr.At.UTC().Format(time.RFC3339), word)
		}
		if e := pol.Expected; e != nil {
			fmt.Fprintf(&b, "  schedule: %q in %s, grace %s (longest expected silence %s)\n", e.Spec, e.Location,
				FormatDuration(e.Grace), FormatDuration(pol.Timeout))
			at := now
			for range 3 {
				at = e.Next(at)
				if at.IsZero() {
					break
				}
				fmt.Fprintf(&b, "    %s  expected\n", at.UTC().Format(time.RFC3339))
			}
		}
	}
	return b.String()
}

// QuietUntil is the end of the quiet spell of type name that covers now; zero when the type is not quiet
// at now (or has no intervals).
func (p *Policies) QuietUntil(name string, now time.Time) time.Time {
	pol, _ := p.Lookup(name)
	until, _ := pol.Calendar.QuietUntil(now)
	return until
}

// QuietNow maps every configured type quiet at now to the end of its quiet spell.
func (p *Policies) QuietNow(now time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	for _, name := range p.names {
		if until, quiet := p.byName[name].Calendar.QuietUntil(now); quiet {
			out[name] = until.UTC()
		}
	}
	return out
}
