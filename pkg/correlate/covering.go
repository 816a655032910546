package correlate

import (
	"context"
	"time"

	"github.com/heartbeatd/heartbeatd/pkg/config"
)

// Member is a device as correlation sees it: its type (a per-device timeout name is taken as its base
// type), its parent and, for Covering's started check, when its interruption was reported.
type Member struct {
	Device, Type, Parent string
	InterruptedAt        time.Time // zero: do not check against the outage's start
}

// Covering returns each member's correlation groups and the open outage covering it: the open outage
// of its first group that has one ("" for none, or when that outage began after InterruptedAt). Two
// round trips at most (labels when a group needs them, the groups' open outages); nothing while
// correlation is off.
func (c *Correlator) Covering(ctx context.Context, members []Member) (groups [][]string, outage []string, err error) {
	outage = make([]string, len(members))
	if c == nil || len(members) == 0 {
		return nil, outage, nil
	}
	devices := make([]string, len(members))
	for i, m := range members {
		devices[i] = m.Device
	}
	labels, err := c.Labels(ctx, devices)
	if err != nil {
		return nil, nil, err
	}
	groups = make([][]string, len(members))
	var all []string
	seen := map[string]bool{}
	for i, m := range members {
		var l map[string]string
		if labels != nil {
			l = labels[i]
		}
		groups[i] = c.Groups(config.BaseType(m.Type), m.Parent, l)
		for _, g := range groups[i] {
			if !seen[g] {
				seen[g] = true
				all = append(all, g)
			}
		}
	}
	open, err := c.Open(ctx, all)
	if err != nil || len(open) == 0 {
		return groups, outage, err
	}
	started, err := c.startedOf(ctx, members)
	if err != nil {
		return nil, nil, err
	}
	for i, m := range members {
		for _, g := range groups[i] {
			id := open[g]
			if id == "" {
				continue
			}
			if start, ok := started[id]; !m.InterruptedAt.IsZero() && (!ok || m.InterruptedAt.Before(start)) {
				break // began after this member's interruption (or ended meanwhile): not its outage
			}
			outage[i] = id
			break
		}
	}
	return groups, outage, nil
}

// startedOf maps each open outage's id to its start, read only when some member asks for the check.
func (c *Correlator) startedOf(ctx context.Context, members []Member) (map[string]time.Time, error) {
	for _, m := range members {
		if m.InterruptedAt.IsZero() {
			continue
		}
		open, err := c.OpenOutages(ctx)
		if err != nil {
			return nil, err
		}
		started := make(map[string]time.Time, len(open))
		for _, o := range open {
			started[o.ID] = o.StartedAt
		}
		return started, nil
	}
	return nil, nil
}

// OpenOutages returns the outages open now, newest first.
func (c *Correlator) OpenOutages(ctx context.Context) ([]Outage, error) {
	all, err := c.Outages(ctx)
	if err != nil {
		return nil, err
	}
	open := all[:0]
	for _, o := range all {
		if o.State == "open" {
			open = append(open, o)
		}
	}
	return open, nil
}
