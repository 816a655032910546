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
	// LongestGap is the longest time between two consecutive occurrences (longestGap): a year for
	// @yearly, eight for 29 February (2096 → 2104). With the grace, the longest silence the schedule
	// expects, which stands in for the type's timeout where a single duration is needed (hold-back grace,
	// late signals that do not name their type, check-config).
	LongestGap time.Duration
}

// cronParser accepts the five standard fields and the @daily-style descriptors, no seconds field and
// no CRON_TZ prefix (the location is schedule_tz).
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// LoadLocation is the location an expected-times schedule is read in: an IANA time zone name (like
// Europe/Berlin). "Local" and "" are refused: they would name each host's own zone, so two replicas could
// expect the same device at different times.
func LoadLocation(name string) (*time.Location, error) {
	loc, err := time.LoadLocation(name)
	if err != nil || name == "" || name == "Local" {
		return nil, fmt.Errorf("%q is not an IANA time zone name (like Europe/Berlin)", name)
	}
	return loc, nil
}

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
		wall = e.wallNext(wall)
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

// searchYears bounds how far ahead wallNext looks for an occurrence: beyond the longest gap any
// 5-field expression can have (29 February: eight years across a century that is not a leap year,
// 2096 → 2104), so only an expression that never occurs finds none.
const searchYears = 20

// wallNext is cron's next occurrence strictly after the wall-clock time wall (read in UTC), or zero when
// there is none within searchYears. robfig/cron gives up five years ahead (its Next returns zero), which
// would leave 29 February unscheduled from 2097 to 2103: the search goes on from where it gave up.
func (e *Expected) wallNext(wall time.Time) time.Time {
	limit := wall.Year() + searchYears
	for {
		if next := e.schedule.Next(wall); !next.IsZero() {
			return next
		}
		// cron searched every time before the year after wall's year + 5 (its own yearLimit counts from
		// wall + 1s, which is never earlier): go on from the last second of that year + 5.
		y := wall.Year() + 5
		if y >= limit {
			return time.Time{}
		}
		wall = time.Date(y, time.December, 31, 23, 59, 59, 0, time.UTC)
	}
}

// cycleDays is the Gregorian calendar's period: 400 years, a whole number of weeks, after which the
// dates, weekdays and leap days repeat.
const cycleDays = 146097

// longestGap is the longest time between two consecutive occurrences. On the wall clock it is exact
// (wallGap: one pass over the matching days of the 400-year Gregorian cycle, not over occurrences, so an
// every-minute schedule costs what a yearly one does). In a zone with daylight saving time, a gap that
// spans a change of offset is that much longer or shorter in real time: the occurrences around each change
// of the next decades are walked (dstGap) and the longest real gap found kept. The one approximation
// left: a longest wall gap that only ever spans clocks going forward is counted at its wall length, up
// to that shift longer than in real time (the safe side: the timeout stands in for the longest silence).
func (e *Expected) longestGap(start time.Time) time.Duration {
	if e.Next(start).IsZero() {
		return 0
	}
	spec, ok := e.schedule.(*cron.SpecSchedule)
	if !ok { // @every: a constant delay
		if d, ok := e.schedule.(cron.ConstantDelaySchedule); ok {
			return max(d.Delay, time.Second)
		}
		return e.walkedGap(start, start.AddDate(1, 0, 0), 20000)
	}
	wall := wallGap(spec)
	if wall == 0 {
		return 0
	}
	return max(wall, e.dstGap(start, wall))
}

// wallGap is the longest wall-clock gap between consecutive occurrences of spec, 0 when it never occurs:
// the longer of the longest gap between two times of one day and the longest from the last time of a
// matching day to the first of the next one.
func wallGap(spec *cron.SpecSchedule) time.Duration {
	var times []int // minutes of the day, ascending
	for h := range 24 {
		if spec.Hour&(1<<uint(h)) == 0 {
			continue
		}
		for m := range 60 {
			if spec.Minute&(1<<uint(m)) != 0 {
				times = append(times, h*60+m)
			}
		}
	}
	if len(times) == 0 {
		return 0
	}
	longest := 0
	for i := 1; i < len(times); i++ {
		longest = max(longest, times[i]-times[i-1])
	}
	// The matching days of one cycle, by their index from 2000-01-01 (a Saturday).
	first, prev, longestDays := -1, -1, 0
	y, mo, d, wd := 2000, time.January, 1, time.Saturday
	for i := range cycleDays {
		if spec.Month&(1<<uint(mo)) != 0 && dayMatches(spec, d, wd) {
			if first < 0 {
				first = i
			} else {
				longestDays = max(longestDays, i-prev)
			}
			prev = i
		}
		d, wd = d+1, (wd+1)%7
		if d > daysIn(mo, y) {
			d, mo = 1, mo+1
			if mo > time.December {
				mo, y = time.January, y+1
			}
		}
	}
	if first < 0 {
		return 0
	}
	longestDays = max(longestDays, first+cycleDays-prev) // the last of one cycle to the first of the next
	span := times[len(times)-1] - times[0]
	longest = max(longest, longestDays*minutesPerDay-span)
	return time.Duration(longest) * time.Minute
}

// dayMatches is cron's rule (robfig/cron's own, which it does not export): with either field a `*` both
// must match, else either does.
func dayMatches(spec *cron.SpecSchedule, day int, wd time.Weekday) bool {
	const star = 1 << 63
	dom, dow := spec.Dom&(1<<uint(day)) != 0, spec.Dow&(1<<uint(wd)) != 0
	if spec.Dom&star != 0 || spec.Dow&star != 0 {
		return dom && dow
	}
	return dom || dow
}

func daysIn(m time.Month, y int) int {
	switch {
	case m == time.February && y%4 == 0 && (y%100 != 0 || y%400 == 0):
		return 29
	case m == time.February:
		return 28
	case m == time.April || m == time.June || m == time.September || m == time.November:
		return 30
	}
	return 31
}

// dstYears is how many years of zone changes dstGap looks at: enough for a change (the last Sunday of a
// month, say) to fall on every weekday and date it can, so a schedule limited to some of them meets it.
const dstYears = 30

// dstGap is the longest real gap between occurrences around one of the location's offset changes in the
// dstYears after start, wall being the longest wall-clock gap; 0 in a zone without changes. Around each
// change, the occurrences from the last one before it (minus the shift) to the first one after it (plus
// the shift) are walked: a gap that spans the change, and those the repeated or skipped wall-clock
// hour lengthens or shortens, are among them.
func (e *Expected) dstGap(start time.Time, wall time.Duration) time.Duration {
	var longest time.Duration
	end := start.AddDate(dstYears, 0, 0)
	for t := start.In(e.Location); ; {
		_, change := t.ZoneBounds()
		if !change.IsZero() && !change.After(t) {
			// Go's zone periods past its table (rules extended from the TZ string) may end where they
			// begin, at a year's end: step over.
			change = t.Add(time.Hour)
		}
		if change.IsZero() || !change.Before(end) {
			break
		}
		_, before := t.Zone()
		_, after := change.Zone()
		t = change
		if before == after {
			continue // a period boundary without a change of offset
		}
		shift := (time.Duration(before-after) * time.Second).Abs() + time.Minute
		longest = max(longest, e.walkedGap(e.lastUpTo(change.Add(-shift), wall+shift), change.Add(shift), 0))
	}
	return longest
}

// lastUpTo is an instant just before the last occurrence at or before t (to the minute), bound being at
// least the longest gap: it looks back twice as far each time, then narrows down, so neither a sparse nor
// a dense schedule is walked from afar.
func (e *Expected) lastUpTo(t time.Time, bound time.Duration) time.Time {
	hit := func(d time.Duration) bool { next := e.Next(t.Add(-d)); return !next.IsZero() && !next.After(t) }
	lo, hi := time.Duration(0), time.Minute // no occurrence in (t−lo, t]; hi: one, or bound
	for hi < bound && !hit(hi) {
		lo, hi = hi, min(2*hi, bound)
	}
	for hi-lo > time.Minute {
		if mid := lo + (hi-lo)/2; hit(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return t.Add(-hi)
}

// walkedGap walks the occurrences from the first after from until one after to (at most maxSteps of them
// when maxSteps > 0) and returns the longest gap between two of them.
func (e *Expected) walkedGap(from, to time.Time, maxSteps int) time.Duration {
	var longest time.Duration
	prev := e.Next(from)
	for i := 0; !prev.IsZero() && !prev.After(to) && (maxSteps <= 0 || i < maxSteps); i++ {
		next := e.Next(prev)
		if next.IsZero() {
			break
		}
		longest = max(longest, next.Sub(prev))
		prev = next
	}
	return longest
}
