package ctl

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/heartbeatd/heartbeatd/pkg/client"
)

// The commands of past incidents and availability (docs/http-api.md#incidents-and-availability).

func incidents(inv *invocation, args []string) error {
	fs := newFlagSet("incidents", inv.g)
	limit := fs.Int("limit", 50, "incidents per page, 1 to 1000")
	cursor := fs.String("cursor", "", "the next page's cursor")
	words, err := inv.args(fs, args, 1, "one device id")
	if err != nil {
		return err
	}
	page, err := call(inv, func(ctx context.Context, c *client.Client) (client.IncidentList, error) {
		return c.Incidents(ctx, words[0], *limit, *cursor)
	})
	if err != nil {
		return err
	}
	if inv.g.output == "json" {
		return writeJSON(inv.out, page)
	}
	t := newTable(inv.out, "OPENED", "CLOSED", "DOWN", "FIRST", "REPEATS", "ACKED BY", "CAUSE", "OUTAGE")
	for _, in := range page.Incidents {
		opened := in.Opened
		acked := ""
		if in.Acked != nil {
			acked = cmp.Or(in.Acked.By, "yes")
		}
		cause := in.Cause
		if in.Reason != "" {
			cause += ": " + in.Reason
		}
		if in.Parent != "" {
			cause = cmp.Or(cause, "parent "+in.Parent)
		}
		t.row(timeOrDash(&opened), closedOrOpen(in.Closed), downFor(in.DownMs), in.FirstKind, fmt.Sprint(in.Repeats), acked, cause, in.OutageID)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if page.NextCursor != "" {
		_, err = fmt.Fprintf(inv.out, "\nmore: --cursor %s\n", page.NextCursor)
	}
	return err
}

func availability(inv *invocation, args []string) error {
	fs := newFlagSet("availability", inv.g)
	window := fs.String("window", "7d", "24h, 7d, 30d, any number of days or a duration")
	groupBy := fs.String("group-by", "", "device_type or label.<name>; none: the fleet as one group")
	if _, err := inv.args(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	a, err := call(inv, func(ctx context.Context, c *client.Client) (client.Availability, error) {
		return c.Availability(ctx, *window, *groupBy)
	})
	if err != nil {
		return err
	}
	if inv.g.output == "json" {
		return writeJSON(inv.out, a)
	}
	t := newTable(inv.out, "GROUP", "DEVICES", "INCIDENTS", "DOWN", "AVAILABILITY", "LEAST AVAILABLE")
	for _, g := range a.Groups {
		var least []string
		for _, d := range g.LeastAvailable[:min(len(g.LeastAvailable), 3)] {
			least = append(least, d.DeviceID+" "+percent(d.Availability))
		}
		t.row(cmp.Or(g.Value, "(fleet)"), fmt.Sprint(g.Devices), fmt.Sprint(g.Incidents), downFor(g.DownMs), percent(g.Availability),
			strings.Join(least, ", "))
	}
	return t.flush()
}

func closedOrOpen(t *time.Time) string {
	if t == nil {
		return "open"
	}
	return timeOrDash(t)
}

// downFor shows a downtime to the second.
func downFor(ms int64) string {
	return (time.Duration(ms) * time.Millisecond).Round(time.Second).String()
}

// percent shows an availability with three decimals: 99.931%.
func percent(a float64) string { return fmt.Sprintf("%.3f%%", 100*a) }
