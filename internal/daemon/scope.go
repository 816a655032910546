package daemon

import (
	"context"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/correlate"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// The fleet views a scoped token gets, each limited to what its scope can be told without a walk over
// the fleet and without a word about devices outside it (docs/access.md#scopes).

// groupInScope reports whether a correlated outage's group is exactly scope's devices: grouped by the
// scope's label with its value, or by device_type with its type. Any other group (by parent, by another
// label) may hold devices outside the scope, and its counts and sample would tell of them.
func groupInScope(g event.Group, scope config.Scope) bool {
	switch {
	case scope.Whole():
		return true
	case scope.Type != "":
		return g.By == "device_type" && g.Value == scope.Type
	}
	return g.By == config.CorrelateByLabel+scope.Label && g.Value == scope.Value
}

// outagesInScope keeps the outages whose group is in scope; never nil.
func outagesInScope(list []correlate.Outage, scope config.Scope) []correlate.Outage {
	out := make([]correlate.Outage, 0, len(list))
	for _, o := range list {
		if groupInScope(o.Group, scope) {
			out = append(out, o)
		}
	}
	return out
}

// streamScope filters a live stream's frames for a scoped token: a device's event when the device is in
// scope (by its type, or by its registered labels, read once per batch), an outage's when its group is;
// watchdog ticks name a replica, not a device, and are left out.
type streamScope struct {
	scope  config.Scope
	labels func(ctx context.Context, devices []string) ([]map[string]string, error)
}

// keep returns the frames of batch in scope, reusing batch's array.
func (s streamScope) keep(ctx context.Context, batch []streamFrame) ([]streamFrame, error) {
	if s.scope.Whole() {
		return batch, nil
	}
	var labels []map[string]string
	if s.scope.Label != "" {
		var devices []string
		for _, f := range batch {
			if f.group == nil && f.kind != event.Watchdog {
				devices = append(devices, f.device)
			}
		}
		if len(devices) > 0 {
			var err error
			if labels, err = s.labels(ctx, devices); err != nil {
				return nil, err
			}
		}
	}
	out, next := batch[:0], 0
	for _, f := range batch {
		var in bool
		switch {
		case f.group != nil:
			in = groupInScope(*f.group, s.scope)
		case f.kind == event.Watchdog:
		case s.scope.Type != "":
			in = s.scope.Matches(f.deviceType, nil)
		default:
			in = s.scope.Matches("", labels[next])
			next++
		}
		if in {
			out = append(out, f)
		}
	}
	return out, nil
}
