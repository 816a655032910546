package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/config"
)

const schedulesYAML = `
time_intervals:
  - name: night
    time_intervals:
      - times: [{start_time: "22:00", end_time: "24:00"}, {start_time: "00:00", end_time: "06:00"}]
        location: Europe/Berlin
  - name: business-hours
    time_intervals:
      - weekdays: ["monday:friday"]
        times: [{start_time: "08:00", end_time: "18:00"}]
        location: Europe/Berlin
types:
  default: {timeout: 60s}
  solar-sensor: {timeout: 10m, quiet: [night]}
  shop-terminal: {timeout: 5m, active: [business-hours]}
  daily-meter: {schedule: "0 2 * * *", schedule_tz: Europe/Berlin, grace: 30m}
`

func TestSchedulesResolve(t *testing.T) {
	cfg, err := config.Parse([]byte(schedulesYAML), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Policies()
	solar, _ := p.Lookup("solar-sensor")
	night := time.Date(2026, 6, 10, 23, 0, 0, 0, time.UTC)
	if until, quiet := solar.Calendar.QuietUntil(night); !quiet || until.UTC().Hour() != 4 {
		t.Fatalf("solar-sensor at 23:00 UTC: quiet=%v until %v, want until 04:00 UTC (06:00 Berlin summer time)", quiet, until)
	}
	if def, _ := p.Lookup("default"); def.Calendar != nil || def.Expected != nil {
		t.Fatal("default without intervals has a calendar or a schedule: it would pay for them on every claim")
	}
	meter, _ := p.Lookup("daily-meter")
	if meter.Expected == nil || meter.Timeout != 25*time.Hour+30*time.Minute {
		t.Fatalf("daily-meter: expected %v, timeout %v; want a schedule and 25h30m (longest gap + grace)", meter.Expected, meter.Timeout)
	}
	table := cfg.ScheduleTable(time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC))
	for _, want := range []string{"solar-sensor:", "quiet: night", "2026-06-10T20:00:00Z  quiet", "2026-06-11T04:00:00Z  watched again",
		"active: business-hours", `schedule: "0 2 * * *" in Europe/Berlin, grace 30m`, "2026-06-11T00:00:00Z  expected"} {
		if !strings.Contains(table, want) {
			t.Errorf("check-config table lacks %q:\n%s", want, table)
		}
	}
}

func TestSchedulesRejectBadInput(t *testing.T) {
	cases := map[string]struct{ yaml, want string }{
		"unknown interval": {`
time_intervals: [{name: night, time_intervals: [{times: [{start_time: "22:00", end_time: "24:00"}]}]}]
types: {default: {timeout: 1m, quiet: [nigth]}}`, `types.default.quiet: "nigth" is not in time_intervals (defined: night)`},
		"no intervals at all": {`
types: {default: {timeout: 1m, active: [work]}}`, `types.default.active: "work" is not in time_intervals (none are defined)`},
		"duplicate name": {`
time_intervals: [{name: a, time_intervals: []}, {name: a, time_intervals: []}]
types: {default: {timeout: 1m}}`, `time_intervals[1].name: "a" is defined twice`},
		"bad time": {`
time_intervals: [{name: a, time_intervals: [{times: [{start_time: "22:00", end_time: "25:00"}]}]}]
types: {default: {timeout: 1m}}`, `25:00`},
		"bad weekday": {`
time_intervals: [{name: a, time_intervals: [{weekdays: [funday]}]}]
types: {default: {timeout: 1m}}`, `funday`},
		"bad location": {`
time_intervals: [{name: a, time_intervals: [{location: Mars/Olympus}]}]
types: {default: {timeout: 1m}}`, `Mars/Olympus`},
		"unknown key in a range": {`
time_intervals: [{name: a, time_intervals: [{weekday: [monday]}]}]
types: {default: {timeout: 1m}}`, `weekday`},
		"bad cron": {`
types: {default: {timeout: 1m}, meter: {schedule: "0 2 * *"}}`, `types.meter.schedule: "0 2 * *"`},
		"schedule and timeout": {`
types: {default: {timeout: 1m}, meter: {schedule: "0 2 * * *", timeout: 1h}}`, `types.meter.timeout: a schedule replaces the timeout`},
		"bad zone": {`
types: {default: {timeout: 1m}, meter: {schedule: "0 2 * * *", schedule_tz: Europe/Berln}}`, `types.meter.schedule_tz: "Europe/Berln" is not an IANA time zone`},
		"grace alone": {`
types: {default: {timeout: 1m}, meter: {grace: 5m}}`, `types.meter.grace: only with schedule`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := config.Parse([]byte(c.yaml), func(string) (string, bool) { return "", false })
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to say %q", err, c.want)
			}
		})
	}
}

func TestSchedulesCloneAndInherit(t *testing.T) {
	cfg, err := config.Parse([]byte(`
time_intervals: [{name: night, time_intervals: [{times: [{start_time: "22:00", end_time: "24:00"}], location: Europe/Berlin}]}]
types:
  default: {timeout: 1m, quiet: [night]}
  loud: {quiet: []}
  sensor: {timeout: 5m}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	clone := cfg.Clone() // the reload path copies the configuration
	p := clone.Policies()
	if sensor, _ := p.Lookup("sensor"); sensor.Calendar == nil {
		t.Fatal("sensor does not inherit default's quiet hours")
	}
	if loud, _ := p.Lookup("loud"); loud.Calendar != nil {
		t.Fatal("quiet: [] does not clear the inherited quiet hours")
	}
}
