package ctl

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/heartbeatd/heartbeatd/internal/matcher"
	"github.com/heartbeatd/heartbeatd/pkg/client"
)

func devicesLs(inv *invocation, args []string) error {
	fs := newFlagSet("devices ls", inv.g)
	var o client.ListOptions
	fs.StringVar(&o.State, "state", "", "online or interrupted")
	fs.StringVar(&o.Type, "type", "", "device type")
	fs.StringVar(&o.Label, "label", "", "a registered label, name=value")
	fs.StringVar(&o.Cursor, "cursor", "", "the next page's cursor")
	fs.IntVar(&o.Limit, "limit", 100, "devices per page, 1 to 10000: a target, a page may hold more")
	if _, err := inv.args(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	page, err := call(inv, func(ctx context.Context, c *client.Client) (client.DeviceList, error) { return c.Devices(ctx, o) })
	if err != nil {
		return err
	}
	if inv.g.output == "json" {
		return writeJSON(inv.out, page)
	}
	t := newTable(inv.out, "DEVICE", "TYPE", "STATE", "LAST SEEN", "ACKED", "SILENCED UNTIL")
	for _, d := range page.Devices {
		t.row(d.DeviceID, d.DeviceType, d.State, timeOrDash(d.LastSeen), yesNo(d.Acked), timeOrDash(d.SilencedUntil))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if page.NextCursor != "" {
		_, err = fmt.Fprintf(inv.out, "\nmore: --cursor %s\n", page.NextCursor)
	}
	return err
}

func devicesGet(inv *invocation, args []string) error {
	words, err := inv.args(newFlagSet("devices get", inv.g), args, 1, "one device id")
	if err != nil {
		return err
	}
	d, err := call(inv, func(ctx context.Context, c *client.Client) (client.Device, error) { return c.Device(ctx, words[0]) })
	if err != nil {
		return err
	}
	if inv.g.output == "json" {
		return writeJSON(inv.out, d)
	}
	t := newTable(inv.out)
	t.row("device", d.DeviceID)
	t.row("type", d.DeviceType)
	t.row("state", d.State)
	t.row("last seen", timeOrDash(d.LastSeen))
	t.row("deadline", timeOrDash(d.Deadline))
	t.row("interrupted at", timeOrDash(d.InterruptedAt))
	t.row("repeats", fmt.Sprint(d.Repeats))
	t.row("acked", yesNo(d.Acked))
	t.row("silenced until", timeOrDash(d.SilencedUntil))
	if d.Parent != "" {
		t.row("parent", d.Parent)
	}
	return t.flush()
}

func ack(inv *invocation, args []string) error {
	return act(inv, args, "ack", "who acts", "one device id", func(ctx context.Context, c *client.Client, id string, a client.Act) (map[string]any, string, error) {
		return map[string]any{"device_id": id, "acked": true}, "acked " + id, c.Ack(ctx, id, a)
	})
}

func signalDevice(inv *invocation, args []string) error {
	fs := newFlagSet("signal", inv.g)
	typ := fs.String("type", "", "the device's type (default: the one recorded for it)")
	words, err := inv.args(fs, args, 1, "one device id")
	if err != nil {
		return err
	}
	if err := inv.request(func(ctx context.Context, c *client.Client) error { return c.Signal(ctx, words[0], *typ) }); err != nil {
		return err
	}
	return inv.done(map[string]any{"device_id": words[0], "signalled": true}, "signalled "+words[0])
}

// act runs an operator act on one id (ack, silence end): its --note and --by, then do.
func act(inv *invocation, args []string, name, byHelp, wants string,
	do func(ctx context.Context, c *client.Client, id string, a client.Act) (map[string]any, string, error)) error {
	fs := newFlagSet(name, inv.g)
	var a client.Act
	fs.StringVar(&a.Note, "note", "", "why")
	fs.StringVar(&a.By, "by", "", byHelp+" (default: the token's name)")
	words, err := inv.args(fs, args, 1, wants)
	if err != nil {
		return err
	}
	var out map[string]any
	var text string
	err = inv.request(func(ctx context.Context, c *client.Client) (err error) {
		out, text, err = do(ctx, c, words[0], a)
		return err
	})
	if err != nil {
		return err
	}
	return inv.done(out, text)
}

func silenceAdd(inv *invocation, args []string) error {
	fs := newFlagSet("silence add", inv.g)
	var s client.NewSilence
	var matchers, intervals repeated
	fs.StringVar(&s.DeviceID, "device", "", "the device to silence")
	fs.StringVar(&s.DeviceType, "type", "", "the type to silence")
	fs.Var(&matchers, "matcher", "name op value, such as labels.site=~ber.* (repeatable: all must match)")
	fs.StringVar(&s.For, "for", "", "how long, such as 2h")
	fs.StringVar(&s.Until, "until", "", "when it ends, RFC 3339")
	fs.Var(&intervals, "interval", "a time_intervals name: recurring, inside it, until deleted (repeatable)")
	fs.StringVar(&s.Comment, "comment", "", "why")
	fs.StringVar(&s.By, "by", "", "who silences (default: the token's name)")
	if _, err := inv.args(fs, args, 0, "no arguments, only flags"); err != nil {
		return err
	}
	if s.DeviceID != "" && s.DeviceType != "" || s.DeviceID == "" && s.DeviceType == "" && len(matchers) == 0 ||
		s.For != "" && s.Until != "" || s.For == "" && s.Until == "" && len(intervals) == 0 {
		return fmt.Errorf("%w: silence add: give --device, --type or --matcher (not both --device and --type), and --for, --until or --interval", errUsage)
	}
	for _, text := range matchers {
		m, err := matcher.Parse(text)
		if err != nil {
			return fmt.Errorf("%w: silence add: --matcher: %v", errUsage, err)
		}
		s.Matchers = append(s.Matchers, m)
	}
	s.TimeIntervals = intervals
	created, err := call(inv, func(ctx context.Context, c *client.Client) (client.Silence, error) { return c.CreateSilence(ctx, s) })
	if err != nil {
		return err
	}
	return inv.done(created, fmt.Sprintf("silence %s %s", created.ID, silenceWhen(created)))
}

// repeated is a flag given any number of times, in order.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

// silenceWhat says what a silence selects: its device or type and its matchers.
func silenceWhat(s client.Silence) string {
	var parts []string
	switch {
	case s.DeviceID != "":
		parts = append(parts, "device "+s.DeviceID)
	case s.DeviceType != "":
		parts = append(parts, "type "+s.DeviceType)
	}
	if len(s.Matchers) > 0 {
		parts = append(parts, matcher.Describe(s.Matchers))
	}
	return strings.Join(parts, ", ")
}

// silenceWhen says when a silence covers its devices: until its end, or inside its intervals.
func silenceWhen(s client.Silence) string {
	until := "until " + s.Ends.Format(timeLayout)
	if len(s.TimeIntervals) == 0 {
		return until
	}
	if s.Ends.Equal(client.RecurringEnds) { // no end was given
		until = "until deleted"
	}
	return "during " + strings.Join(s.TimeIntervals, ", ") + ", " + until
}

func silenceLs(inv *invocation, args []string) error {
	return show(inv, args, "silence ls", func(ctx context.Context, c *client.Client) ([]client.Silence, error) { return c.Silences(ctx) },
		func(list []client.Silence) any { return map[string]any{"silences": list} },
		func(list []client.Silence) error {
			t := newTable(inv.out, "ID", "MATCHES", "WHEN", "BY", "COMMENT")
			for _, s := range list {
				t.row(s.ID, silenceWhat(s), silenceWhen(s), s.By, s.Comment)
			}
			return t.flush()
		})
}

// show runs a command without arguments that fetches one answer and prints it: asJSON's value with
// -o json, else table.
func show[T any](inv *invocation, args []string, name string, fetch func(context.Context, *client.Client) (T, error),
	asJSON func(T) any, table func(T) error) error {
	if _, err := inv.args(newFlagSet(name, inv.g), args, 0, "no arguments"); err != nil {
		return err
	}
	v, err := call(inv, fetch)
	if err != nil {
		return err
	}
	if inv.g.output == "json" {
		return writeJSON(inv.out, asJSON(v))
	}
	return table(v)
}

func silenceEnd(inv *invocation, args []string) error {
	return act(inv, args, "silence end", "who ends it", "one silence id", func(ctx context.Context, c *client.Client, id string, a client.Act) (map[string]any, string, error) {
		return map[string]any{"id": id, "ended": true}, "ended silence " + id, c.EndSilence(ctx, id, a)
	})
}

func outagesLs(inv *invocation, args []string) error {
	return show(inv, args, "outages ls", func(ctx context.Context, c *client.Client) ([]map[string]any, error) { return c.Outages(ctx) },
		func(list []map[string]any) any { return map[string]any{"outages": list} },
		func(list []map[string]any) error {
			t := newTable(inv.out, "ID", "STATE", "GROUP", "STARTED", "SILENT", "MEMBERS")
			for _, o := range list {
				group, _ := o["group"].(map[string]any)
				t.row(str(o["id"]), str(o["state"]), str(group["by"])+"="+str(group["value"]), str(o["started_at"]), str(o["silent"]), str(o["members"]))
			}
			return t.flush()
		})
}

func importFile(inv *invocation, args []string) error {
	words, err := inv.args(newFlagSet("import", inv.g), args, 1, "one file (- for stdin)")
	if err != nil {
		return err
	}
	var r io.Reader = os.Stdin
	if words[0] != "-" {
		f, err := os.Open(words[0])
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	contentType := "application/x-ndjson"
	if strings.EqualFold(filepath.Ext(words[0]), ".csv") {
		contentType = "text/csv"
	}
	res, err := call(inv, func(ctx context.Context, c *client.Client) (client.ImportResult, error) {
		return c.Import(ctx, r, contentType)
	})
	if err != nil {
		return err
	}
	text := fmt.Sprintf("imported %d, failed %d", res.Imported, res.Failed)
	for _, e := range res.Errors {
		text += fmt.Sprintf("\n  line %d: %s", e.Line, e.Error)
	}
	return inv.done(res, text)
}

// request makes one request on a client built from the flags and environment, within the command's
// deadline.
func (inv *invocation) request(req func(context.Context, *client.Client) error) error {
	c, ctx, cancel, err := inv.client()
	if err != nil {
		return err
	}
	defer cancel()
	return req(ctx, c)
}

// call is request for a request that answers with a value.
func call[T any](inv *invocation, req func(context.Context, *client.Client) (T, error)) (v T, err error) {
	err = inv.request(func(ctx context.Context, c *client.Client) (err error) {
		v, err = req(ctx, c)
		return err
	})
	return v, err
}

// done prints a command's result: v as JSON with -o json, else text.
func (inv *invocation) done(v any, text string) error {
	if inv.g.output == "json" {
		return writeJSON(inv.out, v)
	}
	_, err := fmt.Fprintln(inv.out, text)
	return err
}
