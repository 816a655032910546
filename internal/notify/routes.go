package notify

import (
	"fmt"
	"strings"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/matcher"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// route is a notify.routes entry, compiled.
type route struct {
	selector matcher.Selector
	receiver string
	kinds    map[event.Kind]bool
	repeat   bool
	cont     bool
}

func newRoute(i int, r config.NotifyRoute) (route, error) {
	sel, err := matcher.NewSelector(r.Match)
	if err != nil {
		return route{}, fmt.Errorf("notify: notify.routes[%d].match: %w", i, err)
	}
	rt := route{selector: sel, receiver: r.Receiver, kinds: map[event.Kind]bool{}, repeat: r.Repeat, cont: r.Continue}
	for _, k := range r.RouteKinds() {
		rt.kinds[event.Kind(k)] = true
	}
	return rt, nil
}

// takes reports whether the route sends events of kind k: the kinds it names, `alarm` only with repeat,
// a deletion wherever recoveries go (it closes an incident too), a watchdog never.
func (r *route) takes(k event.Kind) bool {
	switch k {
	case event.Watchdog:
		return false
	case event.Alarm:
		return r.repeat
	case event.Deleted:
		return r.kinds[k] || r.kinds[event.Recovered]
	}
	return r.kinds[k]
}

// facts is what matchers look at of one event: its device, type, parent, cause and labels. An outage
// event is the group it is about: an outage of device_type=gateway matches `device_type="gateway"`.
type facts struct {
	e      *event.Event
	labels map[string]string
}

func (f facts) value(label string) string {
	e := f.e
	if g := e.Group; g != nil {
		switch {
		case g.By == label:
			return g.Value
		case strings.TrimPrefix(g.By, config.CorrelateByLabel) == label && strings.HasPrefix(g.By, config.CorrelateByLabel):
			return g.Value
		}
	}
	switch label {
	case "device_id":
		return e.DeviceID
	case "device_type":
		return e.DeviceType
	case "parent":
		return e.Parent
	case "cause":
		return e.Cause
	}
	return f.labels[label]
}

// skip says why a route that matches an event still does not send it on its own: one message per
// outage, and a child under its down parent is the parent's message ("" = it is sent).
func (r *route) skip(e *event.Event, parentLabels func() map[string]string) string {
	if e.OutageID != "" && e.Kind != event.OutageStarted && e.Kind != event.OutageEnded && r.kinds[event.OutageStarted] {
		return resultInOutage
	}
	if e.Kind == event.Suppressed && e.Parent != "" && r.takes(event.Interrupted) {
		parent := event.Event{DeviceID: e.Parent}
		if r.selector.Matches(facts{e: &parent, labels: parentLabels()}.value) {
			return resultUnderParent
		}
	}
	return ""
}

// routing is the routes in order.
type routing []route

// hit is a receiver an event goes to, or why the route that matched it holds it back.
type hit struct {
	receiver string
	held     string
}

// match walks the routes: the first that matches the event and takes its kind wins, unless it says
// continue. A receiver reached by several routes gets the event once.
func (rs routing) match(e *event.Event, labels map[string]string, parentLabels func() map[string]string) []hit {
	var out []hit
	seen := map[string]bool{}
	f := facts{e: e, labels: labels}
	for i := range rs {
		r := &rs[i]
		if !r.takes(e.Kind) || !r.selector.Matches(f.value) {
			continue
		}
		if !seen[r.receiver] {
			seen[r.receiver] = true
			out = append(out, hit{receiver: r.receiver, held: r.skip(e, parentLabels)})
		}
		if !r.cont {
			break
		}
	}
	return out
}
