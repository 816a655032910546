package daemon

import (
	"time"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/pkg/schedule"
)

// The daemon's schedule hooks (docs/schedules.md), each under the current policies, so a reload applies
// changed intervals and schedules at the next signal, claim or request.

// expected is deadline.Options.Expected: the deadline a signal at seen sets for a type with expected times.
func (d *daemon) expected(typeName string, seen time.Time) (time.Time, bool) {
	return d.policies.Load().Expected(typeName, seen)
}

// interval resolves a recurring silence's interval name.
func (d *daemon) interval(name string) *schedule.Interval { return d.policies.Load().Interval(name) }

// quietUntil is the end of the quiet interval type typeName is in at now; zero when it is not quiet.
func (d *daemon) quietUntil(typeName string, now time.Time) time.Time {
	return d.policies.Load().QuietUntil(typeName, now)
}

// quietNow maps each type in a quiet interval at now to its end, for /v1/stats.
func (d *daemon) quietNow(now time.Time) map[string]time.Time { return d.policies.Load().QuietNow(now) }

// scheduleTable is check-config's schedules section: each type's intervals and next transitions from
// now, "" when no type has any.
func scheduleTable(cfg *config.Config) string {
	if t := cfg.ScheduleTable(time.Now()); t != "" {
		return "\n" + t
	}
	return ""
}
