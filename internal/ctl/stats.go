package ctl

import "fmt"

func stats(inv *invocation, args []string) error {
	if _, err := inv.args(newFlagSet("stats", inv.g), args, 0, "no arguments"); err != nil {
		return err
	}
	c, ctx, cancel, err := inv.client()
	if err != nil {
		return err
	}
	defer cancel()
	s, err := c.Stats(ctx, false)
	if err != nil {
		return err
	}
	if inv.g.output == "json" {
		return writeJSON(inv.out, s)
	}
	devices, _ := s["devices"].(map[string]any)
	hold, _ := s["hold_back"].(map[string]any)
	t := newTable(inv.out)
	t.row("online", str(devices["online"]))
	t.row("interrupted", str(devices["interrupted"]))
	t.row("dead claims", str(s["dead_claims"]))
	t.row("claims pending", str(s["claims_pending"]))
	t.row("hold-back active", str(hold["active"]))
	if reason := str(hold["reason"]); reason != "" {
		t.row("hold-back reason", reason)
	}
	if slots, ok := s["owned_slots"].([]any); ok {
		t.row("owned slots", fmt.Sprintf("%d of %s", len(slots), str(s["slots"])))
	}
	return t.flush()
}

func advice(inv *invocation, args []string) error {
	if _, err := inv.args(newFlagSet("advice", inv.g), args, 0, "no arguments"); err != nil {
		return err
	}
	c, ctx, cancel, err := inv.client()
	if err != nil {
		return err
	}
	defer cancel()
	s, err := c.Stats(ctx, true)
	if err != nil {
		return err
	}
	adv, _ := s["advice"].(map[string]any)
	if inv.g.output == "json" {
		return writeJSON(inv.out, adv)
	}
	types, _ := adv["types"].(map[string]any)
	t := newTable(inv.out, "TYPE", "TIMEOUT", "DEVICES", "SAMPLES", "P50", "P99", "SUGGESTED")
	for _, name := range sortedKeys(types) {
		a, _ := types[name].(map[string]any)
		t.row(name, str(a["timeout"]), str(a["devices"]), str(a["samples"]), str(a["p50"]), str(a["p99"]), str(a["suggested_timeout"]))
	}
	return t.flush()
}
