// Package schedule evaluates when silence is expected (docs/schedules.md): named time intervals in
// Alertmanager's syntax (github.com/prometheus/alertmanager/timeinterval, imported so operators can paste
// theirs), the quiet/active calendar of a device type built from them, and a type's expected times
// (5-field cron, github.com/robfig/cron/v3).
//
// It knows nothing of Redis, config files or devices: internal/config builds its values (and reads
// schedule_tz through LoadLocation), internal/deadline and internal/alarm ask them, and internal/silence
// builds the calendars of recurring silences.
package schedule
