package ingest

import (
	"strings"
	"testing"

	"github.com/heartbeatd/heartbeatd/internal/config"
)

// FuzzTopicTemplate: parsing and matching never panic; match agrees with a plain level-by-level
// reading of MQTT filter semantics and, on a match, returns the topic's levels at the placeholders; the
// filter it subscribes matches the same topics; and every subscription that config validation accepts
// parses here too, so check-config cannot pass a template the daemon then refuses.
func FuzzTopicTemplate(f *testing.F) {
	for _, s := range []struct{ template, group, topic string }{
		{"devices/{device_id}/heartbeat", "", "devices/d1/heartbeat"},
		{"devices/{device_id}/heartbeat", "", "devices//heartbeat"},
		{"devices/{device_id}/heartbeat", "", "devices/d1/heartbeat/x"},
		{"fleet/{device_type}/{device_id}/telemetry", "hb", "fleet/gateway/gw-1/telemetry"},
		{"site/+/{device_id}/#", "", "site/a/d9"},
		{"site/+/{device_id}/#", "", "site/a"},
		{"{device_id}", "", ""},
		{"#", "", "a/b"},
		{"/{device_id}/", "", "/x/"},
		{"a/{device_id}", "g/h", "a/b"},
		{"$share/g/{device_id}", "", "x"},
		{"a/x{device_id}", "", "a/x1"},
		{"{device_type}/{device_type}/{device_id}", "", "a/b/c"},
	} {
		f.Add(s.template, s.group, s.topic)
	}
	f.Fuzz(func(t *testing.T, template, group, topic string) {
		tpl, err := parseTemplate(Subscription{Topic: template, SharedGroup: group})

		cfg := config.Default()
		cfg.Types = map[string]config.TypePolicy{config.DefaultType: {}}
		cfg.Ingest.MQTT.Subscriptions = []config.Subscription{{Topic: template, SharedGroup: group}}
		if verr := cfg.Validate(); verr == nil && err != nil {
			t.Fatalf("config accepts %q (group %q) but ingest refuses it: %v", template, group, err)
		}
		if err != nil {
			return
		}

		f, ok := tpl.match(topic)
		device, typ := f.device, f.typ
		wantOK, wantDevice, wantType := referenceMatch(tpl.levels, tpl.device, tpl.typ, topic)
		if ok != wantOK || ok && (device != wantDevice || typ != wantType) {
			t.Fatalf("%q ~ %q: got (%q, %q, %v), want (%q, %q, %v)", template, topic, device, typ, ok, wantDevice, wantType, wantOK)
		}
		filter := tpl.filter
		if group != "" {
			var shared bool
			filter, shared = strings.CutPrefix(filter, "$share/"+group+"/")
			if !shared {
				t.Fatalf("filter %q lacks the $share/%s/ prefix", tpl.filter, group)
			}
		}
		if filterOK, _, _ := referenceMatch(strings.Split(filter, "/"), -1, -1, topic); filterOK != ok {
			t.Fatalf("filter %q and template %q disagree on %q", filter, template, topic)
		}
	})
}

// referenceMatch is MQTT topic matching written the obvious way: "+" and a placeholder take one level,
// "#" the rest (its parent level included), anything else must be equal.
func referenceMatch(levels []string, device, typ int, topic string) (ok bool, dev, ty string) {
	parts := strings.Split(topic, "/")
	for i, l := range levels {
		if l == "#" {
			return true, dev, ty
		}
		if i >= len(parts) {
			return false, "", ""
		}
		switch {
		case i == device:
			dev = parts[i]
		case i == typ:
			ty = parts[i]
		case l == "+":
		case l != parts[i]:
			return false, "", ""
		}
	}
	if len(parts) != len(levels) {
		return false, "", ""
	}
	return true, dev, ty
}
