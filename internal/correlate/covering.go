package correlate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Member is a device as correlation sees it: its configured type, its parent and, for Covering's
// started check, when its interruption was reported.
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
	labels, err := c.labels(ctx, devices)
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
		groups[i] = c.groups(m.Type, m.Parent, l)
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
	var recheck []joined
	for i, m := range members {
		for _, g := range groups[i] {
			id := open[g]
			if id == "" {
				continue
			}
			if start, ok := outageStart(id); !m.InterruptedAt.IsZero() && (!ok || m.InterruptedAt.Before(start)) {
				if ok { // its state may predate the outage's verdict: the group's record says
					recheck = append(recheck, joined{member: i, group: g, id: id, start: start})
				}
				break
			}
			outage[i] = id
			break
		}
	}
	if err := c.joinedAfter(ctx, members, recheck, outage); err != nil {
		return nil, nil, err
	}
	return groups, outage, nil
}

// joined is a member whose state dates its interruption before the open outage of its group began.
type joined struct {
	member    int
	group, id string
	start     time.Time
}

// joinedAfter marks as members of their outage those of recheck that the group recorded at or after
// its start. A claim commits an interruption dated at its deadline, and the alarm loop dates an outage
// member's state at its verdict only when it acknowledges it: a re-read between the two (the
// Alertmanager re-sync) would otherwise take a member for a device interrupted before the outage.
func (c *Correlator) joinedAfter(ctx context.Context, members []Member, recheck []joined, outage []string) error {
	if len(recheck) == 0 {
		return nil
	}
	pipe := c.opts.Client.Pipeline()
	cmds := make([]*redis.FloatCmd, len(recheck))
	for k, j := range recheck {
		cmds[k] = pipe.ZScore(ctx, c.keys.correlated(j.group), members[j.member].Device)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("correlate: members' records: %w", err)
	}
	for k, j := range recheck {
		if ms, err := cmds[k].Result(); err == nil && int64(ms) >= j.start.UnixMilli() {
			outage[j.member] = j.id
		}
	}
	return nil
}

// outageStart is when the outage id began: its id ends with its start in Unix ms (outageID).
func outageStart(id string) (time.Time, bool) {
	ms, err := strconv.ParseInt(id[strings.LastIndexByte(id, '/')+1:], 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
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
