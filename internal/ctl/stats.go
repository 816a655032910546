package ctl

import (
	"context"
	"fmt"

	"github.com/heartbeatd/heartbeatd/pkg/client"
)

func stats(inv *invocation, args []string) error {
	fetch := func(ctx context.Context, c *client.Client) (map[string]any, error) { return c.Stats(ctx, false) }
	return show(inv, args, "stats", fetch, func(s map[string]any) any { return s }, func(s map[string]any) error {
		devices, _ := s["devices"].(map[string]any)
		hold, _ := s["hold_back"].(map[string]any)
		t := newTable(inv.out)
		if scope := str(s["scope"]); scope != "" { // a scoped token gets no fleet counts (docs/access.md#scopes)
			t.row("scope", scope)
		} else {
			t.row("online", str(devices["online"]))
			t.row("interrupted", str(devices["interrupted"]))
			t.row("dead claims", str(s["dead_claims"]))
			t.row("claims pending", str(s["claims_pending"]))
		}
		t.row("hold-back active", str(hold["active"]))
		if reason := str(hold["reason"]); reason != "" {
			t.row("hold-back reason", reason)
		}
		if slots, ok := s["owned_slots"].([]any); ok {
			t.row("owned slots", fmt.Sprintf("%d of %s", len(slots), str(s["slots"])))
		}
		return t.flush()
	})
}

func advice(inv *invocation, args []string) error {
	fetch := func(ctx context.Context, c *client.Client) (map[string]any, error) {
		s, err := c.Stats(ctx, true)
		adv, _ := s["advice"].(map[string]any)
		return adv, err
	}
	return show(inv, args, "advice", fetch, func(adv map[string]any) any { return adv }, func(adv map[string]any) error {
		types, _ := adv["types"].(map[string]any)
		t := newTable(inv.out, "TYPE", "TIMEOUT", "DEVICES", "SAMPLES", "P50", "P99", "SUGGESTED")
		for _, name := range sortedKeys(types) {
			a, _ := types[name].(map[string]any)
			t.row(name, str(a["timeout"]), str(a["devices"]), str(a["samples"]), str(a["p50"]), str(a["p99"]), str(a["suggested_timeout"]))
		}
		return t.flush()
	})
}
