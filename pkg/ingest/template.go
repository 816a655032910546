package ingest

import (
	"fmt"
	"strings"
)

// Topic template placeholders (SPEC §3): each stands for exactly one topic level.
const (
	placeholderDevice = "{device_id}"
	placeholderType   = "{device_type}"
)

// topicTemplate is one subscription: the MQTT filter it subscribes to and where in a topic the device id
// and type are.
type topicTemplate struct {
	filter string   // what is subscribed ($share/<group>/ prefix included)
	levels []string // the template's levels: literal, "+", "#", or a placeholder
	device int      // level index of {device_id}, -1 when none
	typ    int      // level index of {device_type}, -1 when none
}

func parseTemplate(sub Subscription) (topicTemplate, error) {
	t := topicTemplate{device: -1, typ: -1}
	if sub.Topic == "" {
		return t, fmt.Errorf("ingest: mqtt subscription: empty topic")
	}
	if strings.HasPrefix(sub.Topic, "$share/") {
		return t, fmt.Errorf("ingest: mqtt subscription %q: use shared_group instead of a $share/ prefix", sub.Topic)
	}
	t.levels = strings.Split(sub.Topic, "/")
	filter := make([]string, len(t.levels))
	for i, l := range t.levels {
		switch {
		case l == placeholderDevice:
			if t.device >= 0 {
				return t, fmt.Errorf("ingest: mqtt subscription %q: %s twice", sub.Topic, placeholderDevice)
			}
			t.device, filter[i] = i, "+"
		case l == placeholderType:
			if t.typ >= 0 {
				return t, fmt.Errorf("ingest: mqtt subscription %q: %s twice", sub.Topic, placeholderType)
			}
			t.typ, filter[i] = i, "+"
		case strings.ContainsAny(l, "{}"):
			return t, fmt.Errorf("ingest: mqtt subscription %q: level %q: a placeholder must be a whole level ({device_id} or {device_type})", sub.Topic, l)
		case l == "#" && i != len(t.levels)-1:
			return t, fmt.Errorf("ingest: mqtt subscription %q: # must be the last level", sub.Topic)
		case l != "+" && l != "#" && strings.ContainsAny(l, "+#"):
			return t, fmt.Errorf("ingest: mqtt subscription %q: level %q: a wildcard must be a whole level", sub.Topic, l)
		default:
			filter[i] = l
		}
	}
	t.filter = strings.Join(filter, "/")
	if sub.SharedGroup != "" {
		if strings.ContainsAny(sub.SharedGroup, "/+#") {
			return t, fmt.Errorf("ingest: mqtt subscription %q: shared_group %q must not contain / + #", sub.Topic, sub.SharedGroup)
		}
		t.filter = "$share/" + sub.SharedGroup + "/" + t.filter
	}
	return t, nil
}

// match reports whether topic matches the template and returns the device id and type it names, as
// substrings of topic (no allocation).
func (t *topicTemplate) match(topic string) (device, typ string, ok bool) {
	rest := topic
	for i, l := range t.levels {
		if l == "#" {
			return device, typ, true
		}
		level, tail, more := strings.Cut(rest, "/")
		switch {
		case i == t.device:
			device = level
		case i == t.typ:
			typ = level
		case l == "+":
		case l != level:
			return "", "", false
		}
		last := i == len(t.levels)-1
		if last {
			return device, typ, !more
		}
		if !more {
			// The topic ended; only a trailing "#" (which also matches its parent level) may follow.
			if i+1 == len(t.levels)-1 && t.levels[i+1] == "#" {
				return device, typ, true
			}
			return "", "", false
		}
		rest = tail
	}
	return device, typ, true
}

// matchTopic finds the first template matching topic.
func matchTopic(templates []topicTemplate, topic string) (device, typ string, ok bool) {
	for i := range templates {
		if device, typ, ok = templates[i].match(topic); ok {
			return device, typ, true
		}
	}
	return "", "", false
}
