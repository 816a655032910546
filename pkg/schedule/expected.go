package schedule

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Expected is a device type's expected signal times: a 5-field cron expression (minute hour
// day-of-month month day-of-week, with ranges, steps and names) read in a location, and the grace a
// signal may be late. A signal at t sets the deadline to the first occurrence after t + grace.
type Expected struct {
	Spec     string
	Location *time.Location
	Grace    time.Duration
	schedule cron.Schedule
	// LongestGap is the longest time between two occurrences found over a year: with the grace, the
	// longest silence the schedule expects, which stands in for the type's timeout where a single
	// duration is needed (hold-back grace, late signals).
	LongestGap time.Duration
}

// cronParser accepts the five standard fields and the @daily-style descriptors, no seconds field and
// no CRON_TZ prefix (the location is schedule_tz).
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// NewExpected parses spec. The error says what is wrong with the expression.
func NewExpected(spec string, loc *time.Location, grace time.Duration) (*Expected, error) {
	if loc == nil {
		loc = time.UTC
	}
	if strings.HasPrefix(strings.TrimSpace(spec), "CRON_TZ=") || strings.HasPrefix(strings.TrimSpace(spec), "TZ=") {
		return nil, fmt.Errorf("%q: write the time zone in schedule_tz, not in the expression", spec)
	}
	sched, err := cronParser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", spec, err)
	}
	e := &Expected{Spec: spec, Location: loc, Grace: grace, schedule: sched}
	e.LongestGap = e.longestGap(time.Date(2025, 1, 1, 0, 0, 0, 0, loc))
	if e.LongestGap == 0 {
		return nil, fmt.Errorf("%q: never occurs", spec)
	}
	return e, nil
}

// Next is the first occurrence strictly after t. The expression is read on the location's wall clock,
// once per wall-clock time: a time skipped when clocks go forward fires at the same instant as the one
// after the gap (02:30 on a 02:00→03:00 night is 03:30 summer time) instead of a day later, and one that
// occurs twice when clocks go back fires once. cron's own Next on the zone would skip the first and fire
// the second twice: a device expected at 02:00 would be a day overdue in spring unnoticed and reported
// an hour after its upload in autumn.
func (e *Expected) Next(t time.Time) time.Time {
	local := t.In(e.Location)
	wall := time.Date(local.Year(), local.Month(), local.Day(), local.Hour(), local.Minute(), local.Second(),
		local.Nanosecond(), time.UTC)
	for range 3 { // a wall time found is at worst one DST shift early: the next one is not
		wall = e.schedule.Next(wall)
		if wall.IsZero() {
			return time.Time{}
		}
		r := time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), 0, 0, e.Location)
		if r.After(t) {
			return r
		}
		if later := repeatedLater(r); later.After(t) {
			return later
		}
	}
	return time.Time{}
}

// repeatedLater is the second instant showing r's wall-clock time when clocks go back right after r's
// zone period, zero otherwise.
func repeatedLater(r time.Time) time.Time {
	_, off := r.Zone()
	_, end := r.ZoneBounds()
	if end.IsZero() {
		return time.Time{}
	}
	_, offAfter := end.Zone()
	if shift := time.Duration(off-offAfter) * time.Second; shift > 0 {
		if later := r.Add(shift); later.In(r.Location()).Hour() == r.Hour() && later.Minute() == r.Minute() {
			return later
		}
	}
	return time.Time{}
}

// Deadline is the deadline a signal at seen sets: the next occurrence + grace.
func (e *Expected) Deadline(seen time.Time) time.Time { return e.Next(seen).Add(e.Grace) }

// longestGap walks a year of occurrences from start (at most maxSteps of them: an every-minute
// schedule's gap is short anyway).
func (e *Expected) longestGap(start time.Time) time.Duration {
	const maxSteps = 20000
	var longest time.Duration
	prev := e.Next(start)
	if prev.IsZero() {
		return 0
	}
	end := start.AddDate(1, 0, 0)
	for i := 0; i < maxSteps && prev.Before(end); i++ {
		next := e.Next(prev)
		if next.IsZero() {
			break
		}
		longest = max(longest, next.Sub(prev))
		prev = next
	}
	return max(longest, time.Minute)
}
