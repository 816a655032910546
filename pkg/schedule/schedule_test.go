package schedule_test

import (
	"testing"
	"time"

	"github.com/prometheus/alertmanager/timeinterval"
	"gopkg.in/yaml.v3"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/schedule"
)

// interval parses ranges the way the configuration file holds them (Alertmanager's syntax).
func interval(t *testing.T, name, src string) *schedule.Interval {
	t.Helper()
	var ranges []timeinterval.TimeInterval
	if err := yaml.Unmarshal([]byte(src), &ranges); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return &schedule.Interval{Name: name, Ranges: ranges}
}

func berlin(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skipf("no time zone database: %v", err)
	}
	return loc
}

func at(loc *time.Location, s string) time.Time {
	t, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	if err != nil {
		panic(err)
	}
	return t
}

func TestNightEndsAtSixAcrossMidnightWith2400(t *testing.T) {
	loc := berlin(t)
	night := interval(t, "night", `
- times: [{start_time: "22:00", end_time: "24:00"}, {start_time: "00:00", end_time: "06:00"}]
  location: Europe/Berlin`)
	cal := schedule.NewCalendar([]*schedule.Interval{night}, nil)
	clock := testenv.NewClock(at(loc, "2026-06-10 21:59"))
	if _, quiet := cal.QuietUntil(clock.Now()); quiet {
		t.Fatal("21:59 is quiet; night starts at 22:00")
	}
	clock.Advance(time.Minute)
	until, quiet := cal.QuietUntil(clock.Now())
	if want := at(loc, "2026-06-11 06:00"); !quiet || !until.Equal(want) {
		t.Fatalf("at 22:00 quiet=%v until %v, want quiet until %v (24:00 joins 00:00)", quiet, until, want)
	}
	clock.Set(at(loc, "2026-06-11 05:59"))
	if until2, _ := cal.QuietUntil(clock.Now()); !until2.Equal(until) {
		t.Fatalf("05:59 quiet until %v, want %v", until2, until)
	}
	clock.Set(at(loc, "2026-06-11 06:00"))
	if cal.Quiet(clock.Now()) {
		t.Fatal("06:00 is quiet; the end time is exclusive")
	}
}

func TestDSTInANamedLocation(t *testing.T) {
	loc := berlin(t)
	night := interval(t, "night", `
- times: [{start_time: "01:00", end_time: "04:00"}]
  location: Europe/Berlin`)
	cal := schedule.NewCalendar([]*schedule.Interval{night}, nil)
	// Spring forward, 2026-03-29 02:00 → 03:00: the night is two hours long and still ends at 04:00 local.
	start := at(loc, "2026-03-29 01:00")
	until, quiet := cal.QuietUntil(start)
	if want := at(loc, "2026-03-29 04:00"); !quiet || !until.Equal(want) || until.Sub(start) != 2*time.Hour {
		t.Fatalf("spring: quiet=%v until %v (%v long), want until %v, 2h", quiet, until, until.Sub(start), want)
	}
	// Fall back, 2026-10-25 03:00 → 02:00: four hours long.
	start = at(loc, "2026-10-25 01:00")
	until, quiet = cal.QuietUntil(start)
	if want := at(loc, "2026-10-25 04:00"); !quiet || !until.Equal(want) || until.Sub(start) != 4*time.Hour {
		t.Fatalf("autumn: quiet=%v until %v (%v long), want until %v, 4h", quiet, until, until.Sub(start), want)
	}
}

func TestDSTRepeatedHourBoundary(t *testing.T) {
	loc := berlin(t)
	// 02:00–02:30 occurs twice on 2026-10-25: the second spell has its own end.
	iv := interval(t, "half", `
- times: [{start_time: "02:00", end_time: "02:30"}]
  location: Europe/Berlin`)
	cal := schedule.NewCalendar([]*schedule.Interval{iv}, nil)
	tr := cal.Transitions(at(loc, "2026-10-25 00:00"), 4)
	if len(tr) != 4 {
		t.Fatalf("transitions %v, want 4 (the wall-clock half hour occurs twice)", tr)
	}
	first := tr[0].At
	for i, want := range []time.Duration{0, 30 * time.Minute, time.Hour, 90 * time.Minute} {
		if got := tr[i].At.Sub(first); got != want || tr[i].Quiet != (i%2 == 0) {
			t.Fatalf("transition %d: %v after the first, quiet=%v; want %v, quiet=%v (all: %v)", i, got, tr[i].Quiet, want, i%2 == 0, tr)
		}
	}
}

func TestActiveWeekdaysBusinessHours(t *testing.T) {
	loc := berlin(t)
	biz := interval(t, "business-hours", `
- weekdays: ["monday:friday"]
  times: [{start_time: "08:00", end_time: "18:00"}]
  location: Europe/Berlin`)
	cal := schedule.NewCalendar(nil, []*schedule.Interval{biz})
	// Friday 2026-06-12 18:00 until Monday 08:00 is outside the active interval: quiet.
	until, quiet := cal.QuietUntil(at(loc, "2026-06-12 18:00"))
	if want := at(loc, "2026-06-15 08:00"); !quiet || !until.Equal(want) {
		t.Fatalf("Friday 18:00: quiet=%v until %v, want until Monday %v", quiet, until, want)
	}
	if cal.Quiet(at(loc, "2026-06-15 12:00")) {
		t.Fatal("Monday noon is quiet for an active business-hours type")
	}
	if !cal.Quiet(at(loc, "2026-06-13 12:00")) {
		t.Fatal("Saturday noon is not quiet")
	}
}

func TestNegativeDaysOfMonthAndMonthRanges(t *testing.T) {
	// The last two days of each month from November to February, all day, UTC.
	iv := interval(t, "month-end", `
- days_of_month: ["-2:-1"]
  months: ["november:december", "january:february"]`)
	cal := schedule.NewCalendar([]*schedule.Interval{iv}, nil)
	cases := []struct {
		at    time.Time
		quiet bool
		until time.Time
	}{
		{time.Date(2027, 2, 27, 12, 0, 0, 0, time.UTC), true, time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)}, // 28-day February
		{time.Date(2028, 2, 27, 12, 0, 0, 0, time.UTC), false, time.Time{}},                                // leap year: 28th is -2
		{time.Date(2028, 2, 28, 0, 0, 0, 0, time.UTC), true, time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC)},
		{time.Date(2026, 12, 30, 0, 0, 0, 0, time.UTC), true, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}, // January's end is a month away
		{time.Date(2026, 6, 30, 0, 0, 0, 0, time.UTC), false, time.Time{}},
	}
	for _, c := range cases {
		until, quiet := cal.QuietUntil(c.at)
		if quiet != c.quiet || !until.Equal(c.until) {
			t.Errorf("%v: quiet=%v until %v; want quiet=%v until %v", c.at, quiet, until, c.quiet, c.until)
		}
	}
	tr := cal.Transitions(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), 2)
	if len(tr) != 2 || !tr[0].At.Equal(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)) || !tr[0].Quiet {
		t.Fatalf("from June: %v, want quiet from 2026-11-29", tr)
	}
}

func TestNoIntervalsNoCalendar(t *testing.T) {
	if cal := schedule.NewCalendar(nil, nil); cal != nil {
		t.Fatal("a type without intervals got a calendar")
	}
	var cal *schedule.Calendar
	if _, quiet := cal.QuietUntil(time.Now()); quiet {
		t.Fatal("a nil calendar is quiet")
	}
}

func TestExpectedDailyAcrossDST(t *testing.T) {
	loc := berlin(t)
	e, err := schedule.NewExpected("0 2 * * *", loc, 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	clock := testenv.NewClock(at(loc, "2026-10-24 02:05"))
	// 02:00 occurs twice on 2026-10-25; the schedule fires once, at the second (01:00 UTC).
	if got, want := e.Deadline(clock.Now()), time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("deadline %v, want %v", got, want)
	}
	if e.LongestGap < 24*time.Hour || e.LongestGap > 25*time.Hour {
		t.Fatalf("longest gap %v, want a day (25h across the autumn change)", e.LongestGap)
	}
	// A signal just after the 02:00 of the autumn night is not expected again an hour later.
	if got, want := e.Next(time.Date(2026, 10, 25, 1, 5, 0, 0, time.UTC)), at(loc, "2026-10-26 02:00"); !got.Equal(want) {
		t.Fatalf("after 02:00 of 2026-10-25: next %v, want %v", got, want)
	}
	// 02:00 does not exist on 2026-03-29: expected at 03:00 summer time, not a day later.
	if got, want := e.Next(at(loc, "2026-03-28 12:00")), at(loc, "2026-03-29 03:00"); !got.Equal(want) {
		t.Fatalf("spring night: next %v, want %v", got, want)
	}
}

func TestExpectedRangesStepsNames(t *testing.T) {
	e, err := schedule.NewExpected("*/15 8-17 * JAN-MAR MON-FRI", time.UTC, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Friday 2027-01-29 17:50 → next is Monday 2027-02-01 08:00.
	if got, want := e.Next(time.Date(2027, 1, 29, 17, 50, 0, 0, time.UTC)), time.Date(2027, 2, 1, 8, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("next %v, want %v", got, want)
	}
	for _, bad := range []string{"0 2 * *", "61 * * * *", "0 0 30 2 *", "CRON_TZ=UTC 0 2 * * *", "0 0 2 * * *"} {
		if _, err := schedule.NewExpected(bad, time.UTC, 0); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Schedules mean what cron means, however rare: the next occurrence of @yearly is next New Year, and
// the longest gap (the type's stand-in timeout) is the real one, a year and not a minute.
func TestExpectedYearly(t *testing.T) {
	for _, spec := range []string{"@yearly", "@annually", "0 0 1 1 *"} {
		e, err := schedule.NewExpected(spec, time.UTC, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if want := 366 * 24 * time.Hour; e.LongestGap != want {
			t.Errorf("%s: longest gap %v, want %v (a leap year)", spec, e.LongestGap, want)
		}
		clock := testenv.NewClock(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC))
		if got, want := e.Deadline(clock.Now()), time.Date(2027, 1, 1, 1, 0, 0, 0, time.UTC); !got.Equal(want) {
			t.Errorf("%s: deadline of a signal on 2026-05-01 %v, want next New Year + grace %v", spec, got, want)
		}
		clock.Set(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
		if got, want := e.Next(clock.Now()), time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC); !got.Equal(want) {
			t.Errorf("%s: after New Year 2027: next %v, want %v", spec, got, want)
		}
	}
}

// 29 February is up to eight years apart (2100 is no leap year): further than robfig/cron looks ahead.
func TestExpectedLeapDay(t *testing.T) {
	e, err := schedule.NewExpected("0 0 29 2 *", time.UTC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2104, 2, 29, 0, 0, 0, 0, time.UTC).Sub(time.Date(2096, 2, 29, 0, 0, 0, 0, time.UTC)); e.LongestGap != want {
		t.Errorf("longest gap %v, want %v (2096 → 2104)", e.LongestGap, want)
	}
	for from, want := range map[time.Time]time.Time{
		time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC):  time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC),
		time.Date(2096, 2, 29, 0, 0, 0, 0, time.UTC): time.Date(2104, 2, 29, 0, 0, 0, 0, time.UTC),
		time.Date(2099, 7, 1, 0, 0, 0, 0, time.UTC):  time.Date(2104, 2, 29, 0, 0, 0, 0, time.UTC),
	} {
		if got := e.Next(from); !got.Equal(want) {
			t.Errorf("after %v: next %v, want %v", from, got, want)
		}
	}
}

func TestExpectedMonthly(t *testing.T) {
	loc := berlin(t)
	for l, want := range map[*time.Location]time.Duration{
		time.UTC: 31 * 24 * time.Hour,
		loc:      31*24*time.Hour + time.Hour, // 1 October → 1 November spans the autumn change
	} {
		e, err := schedule.NewExpected("@monthly", l, 0)
		if err != nil {
			t.Fatal(err)
		}
		if e.LongestGap != want {
			t.Errorf("%v: longest gap %v, want %v", l, e.LongestGap, want)
		}
		if got, want := e.Next(time.Date(2026, 2, 15, 12, 0, 0, 0, l)), time.Date(2026, 3, 1, 0, 0, 0, 0, l); !got.Equal(want) {
			t.Errorf("%v: next %v, want %v", l, got, want)
		}
	}
}

func TestExpectedEveryMinute(t *testing.T) {
	e, err := schedule.NewExpected("* * * * *", time.UTC, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if e.LongestGap != time.Minute {
		t.Errorf("longest gap %v, want 1m", e.LongestGap)
	}
	clock := testenv.NewClock(time.Date(2026, 6, 10, 12, 0, 20, 0, time.UTC))
	if got, want := e.Deadline(clock.Now()), time.Date(2026, 6, 10, 12, 1, 30, 0, time.UTC); !got.Equal(want) {
		t.Errorf("deadline %v, want %v", got, want)
	}
	// On the wall clock of a zone with daylight saving time, the repeated hour fires once: from 01:59
	// summer time to 02:00 winter time is 61 minutes, the longest silence the schedule expects.
	loc := berlin(t)
	e, err = schedule.NewExpected("* * * * *", loc, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := 61 * time.Minute; e.LongestGap != want {
		t.Errorf("Berlin: longest gap %v, want %v", e.LongestGap, want)
	}
	hourly, err := schedule.NewExpected("0 * * * *", loc, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * time.Hour; hourly.LongestGap != want {
		t.Errorf("Berlin hourly: longest gap %v, want %v", hourly.LongestGap, want)
	}
}

// A schedule is read in a named zone: a misspelt name is refused, and so are "Local" and "", which would
// be each host's own zone, so that replicas could expect one device at different times.
func TestLoadLocation(t *testing.T) {
	berlin(t) // skips without a time zone database
	loc, err := schedule.LoadLocation("Europe/Berlin")
	if err != nil || loc.String() != "Europe/Berlin" {
		t.Fatalf("Europe/Berlin: %v, %v", loc, err)
	}
	for _, name := range []string{"Europe/Berln", "Local", ""} {
		if _, err := schedule.LoadLocation(name); err == nil {
			t.Errorf("%q: accepted", name)
		}
	}
}
