package daemon

import (
	"time"

	"github.com/heartbeatd/heartbeatd/pkg/deadline"
)

// viewDeadline sets a device view's last_seen and deadline from its stored deadline dl. A type with
// warn_after stores its warning (last signal + warn_after, docs/events.md), so the view shows the deadline
// it is interrupted at, and a device reported late (not interrupted yet) has the state late.
func (a *api) viewDeadline(v *DeviceView, d deadline.Device, dl time.Time) {
	timeout := a.Timeout(d.Type)
	lead := timeout
	if a.WarnAfter != nil {
		if w := a.WarnAfter(d.Type); w > 0 {
			lead = w
		}
	}
	v.LastSeen = ptr(dl.Add(-lead))
	v.Deadline = ptr(dl.Add(timeout - lead))
	if inc := d.Incident; inc != nil && inc.Hold == deadline.HoldLate && inc.Next == 0 {
		v.State = "late"
		v.Deadline = ptr(time.UnixMilli(inc.InterruptedAt))
	}
}
