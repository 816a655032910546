package schedule

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/alertmanager/timeinterval"
)

// Interval is one named entry of the configuration's time_intervals: a time is inside it when it is
// inside any of its ranges (as in Alertmanager).
type Interval struct {
	Name   string
	Ranges []timeinterval.TimeInterval
}

// contains reports whether t is inside the interval. A range without a location is read in UTC, so the
// answer does not depend on the host's time zone.
func (iv *Interval) contains(t time.Time) bool {
	t = t.UTC()
	for _, r := range iv.Ranges {
		if r.ContainsTime(t) {
			return true
		}
	}
	return false
}

// horizon is how far ahead a calendar looks for the end of a quiet spell. A spell longer than that (a
// years: range) is reported as ending at the horizon; the claim then looks again.
const horizon = 400 * 24 * time.Hour

// Calendar is a device type's quiet and active intervals: a time is quiet when it is inside a quiet
// interval, or when the type has active intervals and it is outside all of them.
type Calendar struct {
	quiet, active []*Interval
	// locations are every range's location (UTC for none): quietness can only change at a local
	// midnight, a time-range boundary or a zone transition of one of them.
	locations []*time.Location
	bounds    []int // minute-of-day boundaries of every time range, 0 included
	// spell caches the last quiet spell found, [from, until): a burst of claims that all fall due at the
	// same interval's end asks once, not once per device.
	spell atomic.Pointer[[2]time.Time]
}

// NewCalendar returns the calendar of the given quiet and active intervals; nil when both are empty, so a
// type without intervals carries no calendar.
func NewCalendar(quiet, active []*Interval) *Calendar {
	if len(quiet) == 0 && len(active) == 0 {
		return nil
	}
	c := &Calendar{quiet: quiet, active: active, bounds: []int{0}}
	for _, iv := range slices.Concat(quiet, active) {
		for _, r := range iv.Ranges {
			loc := time.UTC
			if r.Location != nil && r.Location.Location != nil {
				loc = r.Location.Location
			}
			if !slices.ContainsFunc(c.locations, func(l *time.Location) bool { return l.String() == loc.String() }) {
				c.locations = append(c.locations, loc)
			}
			for _, tr := range r.Times {
				c.bounds = append(c.bounds, tr.StartMinute, tr.EndMinute%minutesPerDay)
			}
		}
	}
	if len(c.locations) == 0 {
		c.locations = []*time.Location{time.UTC}
	}
	slices.Sort(c.bounds)
	c.bounds = slices.Compact(c.bounds)
	return c
}

const minutesPerDay = 24 * 60

// Quiet reports whether t is quiet.
func (c *Calendar) Quiet(t time.Time) bool {
	if c == nil {
		return false
	}
	for _, iv := range c.quiet {
		if iv.contains(t) {
			return true
		}
	}
	if len(c.active) == 0 {
		return false
	}
	for _, iv := range c.active {
		if iv.contains(t) {
			return false
		}
	}
	return true
}

// QuietUntil reports whether t is quiet and, when it is, the first instant after t that is not (at most
// t + Horizon).
func (c *Calendar) QuietUntil(t time.Time) (until time.Time, quiet bool) {
	if c == nil {
		return time.Time{}, false
	}
	if s := c.spell.Load(); s != nil && !t.Before(s[0]) && t.Before(s[1]) {
		return s[1], true
	}
	if !c.Quiet(t) {
		return time.Time{}, false
	}
	until = c.nextChange(t, true)
	c.spell.Store(&[2]time.Time{t, until})
	return until, true
}

// Transition is a change of a calendar's quietness.
type Transition struct {
	At    time.Time
	Quiet bool // quiet from At on
}

// Transitions lists the next n changes after from (fewer when the horizon comes first).
func (c *Calendar) Transitions(from time.Time, n int) []Transition {
	if c == nil {
		return nil
	}
	var out []Transition
	quiet := c.Quiet(from)
	end := from.Add(horizon)
	for len(out) < n {
		at := c.nextChange(from, quiet)
		if !at.Before(end) {
			break
		}
		quiet = !quiet
		out = append(out, Transition{At: at, Quiet: quiet})
		from = at
	}
	return out
}

// nextChange returns the first instant after t whose quietness differs from quiet (t + Horizon when
// none does). Quietness is constant between candidate instants (candidates), so only they are tested,
// a week at a time.
func (c *Calendar) nextChange(t time.Time, quiet bool) time.Time {
	const week = 7
	end := t.Add(horizon)
	checked := t
	for day := -1; ; day += week - 2 { // weeks overlap by two days: see below
		var cands []time.Time
		safe := end
		for _, loc := range c.locations {
			y, m, d := t.In(loc).Date()
			for k := day; k < day+week; k++ {
				cands = c.candidates(cands, loc, y, m, d+k)
			}
			// Candidates of other locations' later days may come before this location's last day ends:
			// only instants before every location's end of the week are complete.
			safe = minTime(safe, time.Date(y, m, d+day+week, 0, 0, 0, 0, loc))
		}
		slices.SortFunc(cands, func(a, b time.Time) int { return a.Compare(b) })
		for _, x := range cands {
			// Instants before checked were tested by the week before; safe itself is the next week's.
			if x.After(t) && !x.Before(checked) && x.Before(safe) && c.Quiet(x) != quiet {
				return x
			}
		}
		checked = maxTime(checked, safe)
		if !checked.Before(end) {
			return end
		}
	}
}

// candidates appends the instants of local day (y, m, d) in loc at which quietness may change: each
// time-range boundary, under each UTC offset in force that day (a wall-clock time occurs twice when
// clocks go back and not at all when they go forward), and the zone transition itself.
func (c *Calendar) candidates(out []time.Time, loc *time.Location, y int, m time.Month, d int) []time.Time {
	midnight := time.Date(y, m, d, 0, 0, 0, 0, loc)
	next := time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	y, m, d = midnight.Date() // normalised
	_, off1 := midnight.Zone()
	_, off2 := next.Add(-time.Nanosecond).Zone()
	if _, zoneEnd := midnight.ZoneBounds(); !zoneEnd.IsZero() && zoneEnd.Before(next) {
		out = append(out, zoneEnd)
	}
	wall := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	for _, b := range c.bounds {
		for i, off := range []int{off1, off2} {
			if i == 1 && off == off1 {
				break
			}
			x := wall.Add(time.Duration(b)*time.Minute - time.Duration(off)*time.Second)
			if lx := x.In(loc); lx.Day() == d && lx.Hour()*60+lx.Minute() == b {
				out = append(out, x)
			}
		}
	}
	return out
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
