package daemon

import (
	"time"

	"github.com/heartbeatd/heartbeatd/internal/alarm"
	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

// policy is what the API dates device d by: its type's timeout and warn_after, or its own timeout.
func (a *api) policy(d deadline.Device) config.Policy {
	p := config.Policy{Timeout: a.Timeout(d.Type)}
	if a.WarnAfter != nil {
		p.WarnAfter = a.WarnAfter(d.Type)
	}
	return p.WithOwnTimeout(d.OwnTimeout)
}

// viewDeadline sets a device view's last_seen and deadline from its stored deadline dl. A type with
// warn_after stores its warning (last signal + warn_after, docs/events.md), so the view shows the deadline
// it is interrupted at, and a device reported late (not interrupted yet) has the state late.
func (a *api) viewDeadline(v *DeviceView, d deadline.Device, dl time.Time) {
	st := deadline.State{Deadline: dl.UnixMilli()}
	if d.Incident != nil {
		st = *d.Incident
	}
	shown, lastSeen := alarm.EventTimes(st, a.policy(d))
	v.LastSeen, v.Deadline = ptr(lastSeen), ptr(shown)
	if st.Hold == deadline.HoldLate && st.Next == 0 {
		v.State = "late"
		v.Deadline = ptr(time.UnixMilli(st.InterruptedAt))
	}
}
