package daemon

import (
	"time"

	"github.com/heartbeatd/heartbeatd/pkg/alarm"
	"github.com/heartbeatd/heartbeatd/pkg/config"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
)

// policy is what the API dates a device of type typ by: its timeout and warn_after.
func (a *api) policy(typ string) config.Policy {
	p := config.Policy{Timeout: a.Timeout(typ)}
	if a.WarnAfter != nil {
		p.WarnAfter = a.WarnAfter(typ)
	}
	return p
}

// viewDeadline sets a device view's last_seen and deadline from its stored deadline dl. A type with
// warn_after stores its warning (last signal + warn_after, docs/events.md), so the view shows the deadline
// it is interrupted at, and a device reported late (not interrupted yet) has the state late.
func (a *api) viewDeadline(v *DeviceView, d deadline.Device, dl time.Time) {
	st := deadline.State{Deadline: dl.UnixMilli()}
	if d.Incident != nil {
		st = *d.Incident
	}
	shown, lastSeen := alarm.EventTimes(st, a.policy(d.Type))
	v.LastSeen, v.Deadline = ptr(lastSeen), ptr(shown)
	if st.Hold == deadline.HoldLate && st.Next == 0 {
		v.State = "late"
		v.Deadline = ptr(time.UnixMilli(st.InterruptedAt))
	}
}
