package history

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/pkg/client"
)

// leastAvailable is how many of a group's least available devices GET /v1/availability names.
const leastAvailable = 10

// GroupQuery asks for the availability of groups over a window.
type GroupQuery struct {
	Window time.Duration
	// GroupBy is "device_type", "label.<name>" (a name in history.group_labels) or "" for the whole fleet.
	GroupBy string
	// Only, when set, keeps the group of that value alone (a scoped token's).
	Only string
	// FleetSize is the fleet's devices (deadline.Store.Count: a count per slot, no walk), for GroupBy "":
	// the fleet's devices without an incident in the window count as available throughout, so devices
	// and availability are the fleet's. 0: unknown. The size of a type's or a label's group is kept
	// nowhere, so a group's figures are those of its devices with incidents (docs/http-api.md).
	FleetSize int64
}

// CheckGroupBy says whether groupBy is a grouping the history keeps figures for.
func (s *Store) CheckGroupBy(groupBy string) error {
	if groupBy == "" || groupBy == dimType {
		return nil
	}
	name, ok := strings.CutPrefix(groupBy, "label.")
	if ok && slices.Contains(s.opts.History.GroupLabels, name) {
		return nil
	}
	if ok {
		return fmt.Errorf("%w: group_by %s: no figures are kept by label %q (history.group_labels: %v)", ErrNotKept, groupBy, name,
			s.opts.History.GroupLabels)
	}
	return fmt.Errorf("%w: group_by must be device_type or label.<name>, got %q", ErrBadRequest, groupBy)
}

// Groups answers GET /v1/availability from the day figures of the window's days: one hash per day and
// bucket, holding only the devices that had an incident, never a walk of the fleet. Figures are per UTC day: the
// window's first day counts in proportion to the part of it inside the window.
func (s *Store) Groups(ctx context.Context, q GroupQuery) ([]client.AvailabilityGroup, error) {
	if err := s.CheckGroupBy(q.GroupBy); err != nil {
		return nil, err
	}
	if q.Window <= 0 || q.Window > s.opts.History.Retention {
		return nil, fmt.Errorf("%w: window must be more than 0 and at most history.retention (%s)", ErrBadRequest, s.opts.History.Retention)
	}
	dim := q.GroupBy
	if dim == "" {
		dim = dimType // the fleet: every device with figures has a type
	}
	now := s.opts.Now().UnixMilli()
	from := now - q.Window.Milliseconds()
	pipe := s.opts.Client.Pipeline()
	var cmds []*redis.MapStringStringCmd
	var days []int64
	for d := dayOf(from); d <= dayOf(now); d++ {
		for b := range buckets {
			cmds = append(cmds, pipe.HGetAll(ctx, s.keys.day(b, d, dim)))
			days = append(days, d)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("history: read day figures: %w", err)
	}
	type key struct{ group, device string }
	figures := map[key]*client.DeviceAvailability{}
	for i, c := range cmds {
		for field, raw := range c.Val() {
			value, device, ok := splitGroupField(field)
			f, good := parseDayFigure(raw)
			if !ok || !good || (q.Only != "" && value != q.Only) {
				continue
			}
			if q.GroupBy == "" {
				value = ""
			}
			k := key{value, device}
			da := figures[k]
			if da == nil {
				da = &client.DeviceAvailability{DeviceID: device}
				figures[k] = da
			}
			start, end := days[i]*dayMs, (days[i]+1)*dayMs
			if start >= from {
				da.DownMs += f.Down
			} else if after := end - from; after > 0 { // the window's first day: the part inside it
				da.DownMs += f.Down * after / dayMs
			}
			if f.OpenSince != 0 && f.OpenSince < now {
				da.DownMs += now - max(f.OpenSince, from)
			}
			da.Incidents += f.Incidents
		}
	}
	span := now - from
	groups := map[string]*client.AvailabilityGroup{}
	members := map[string][]client.DeviceAvailability{}
	for k, da := range figures {
		if da.DownMs == 0 && da.Incidents == 0 {
			continue
		}
		da.DownMs = min(da.DownMs, span)
		da.Availability = 1 - float64(da.DownMs)/float64(span)
		g := groups[k.group]
		if g == nil {
			g = &client.AvailabilityGroup{Value: k.group}
			groups[k.group] = g
		}
		g.Devices++
		g.DownMs += da.DownMs
		g.Incidents += da.Incidents
		g.Availability += da.Availability
		members[k.group] = append(members[k.group], *da)
	}
	if q.GroupBy == "" && q.FleetSize > 0 && groups[""] == nil {
		groups[""] = &client.AvailabilityGroup{} // no incident in the window: the fleet was available throughout
	}
	out := make([]client.AvailabilityGroup, 0, len(groups))
	for value, g := range groups {
		if q.GroupBy == "" && q.FleetSize > 0 {
			// The fleet's other devices were available throughout: 1 each.
			fleet := max(q.FleetSize, int64(g.Devices))
			g.Availability += float64(fleet - int64(g.Devices))
			g.Devices = int(fleet)
		}
		g.Availability /= float64(g.Devices)
		m := members[value]
		slices.SortFunc(m, func(a, b client.DeviceAvailability) int {
			if a.Availability != b.Availability {
				if a.Availability < b.Availability {
					return -1
				}
				return 1
			}
			return strings.Compare(a.DeviceID, b.DeviceID)
		})
		g.LeastAvailable = append([]client.DeviceAvailability{}, m[:min(len(m), leastAvailable)]...)
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b client.AvailabilityGroup) int { return strings.Compare(a.Value, b.Value) })
	return out, nil
}

// OpenByGroup counts, per value of the grouping groupBy ("device_type" or a kept "label.<name>"), the
// devices with an open incident (late, suppressed or interrupted): counts kept with the incidents, one
// hash read per bucket, never a walk of the fleet.
func (s *Store) OpenByGroup(ctx context.Context, groupBy string) (map[string]int64, error) {
	if err := s.CheckGroupBy(groupBy); err != nil || groupBy == "" {
		return nil, cmp.Or(err, fmt.Errorf("%w: group_by is needed", ErrBadRequest))
	}
	pipe := s.opts.Client.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, buckets)
	for b := range buckets {
		cmds[b] = pipe.HGetAll(ctx, s.keys.open(b, groupBy))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("history: read open counts: %w", err)
	}
	out := map[string]int64{}
	for _, c := range cmds {
		for value, raw := range c.Val() {
			if n, err := strconv.ParseInt(raw, 10, 64); err == nil && n > 0 {
				out[value] += n
			}
		}
	}
	return out, nil
}
