package ingest

import (
	"fmt"
	"strings"
)

// Topic template placeholders (docs/configuration.md): each stands for exactly one topic level.
const (
	placeholderDevice = "{device_id}"
	placeholderType   = "{device_type}"
	placeholderParent = "{parent_id}"
)

// topicTemplate is one subscription: the MQTT filter it subscribes to and where in a topic the device id
// and type are.
type topicTemplate struct {
	filter string   // what is subscribed ($share/<group>/ prefix included)
	levels []string // the template's levels: literal, "+", "#", or a placeholder
	device int      // level index of {device_id}, -1 when none
	typ    int      // level index of {device_type}, -1 when none
	parent int      // level index of {parent_id}, -1 when none
	// presence and payload: a presence subscription's kind and the payload it takes ("" = any); see
	// config.Subscription.
	presence, payload string
}

// topicFields are what a topic names through its template's placeholders ("" where it has none).
type topicFields struct {
	device, typ, parent string
	// hasDevice: the template has a {device_id} level, so device is what the topic holds there, even
	// when that level is empty (devices//heartbeat): bad input, not a topic that names no device.
	hasDevice bool
}

func parseTemplate(sub Subscription) (topicTemplate, error) {
	t := topicTemplate{device: -1, typ: -1, parent: -1, presence: sub.Presence, payload: strings.TrimSpace(sub.Payload)}
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
		case l == placeholderParent:
			if t.parent >= 0 {
				return t, fmt.Errorf("ingest: mqtt subscription %q: %s twice", sub.Topic, placeholderParent)
			}
			t.parent, filter[i] = i, "+"
		case strings.ContainsAny(l, "{}"):
			return t, fmt.Errorf("ingest: mqtt subscription %q: level %q: a placeholder must be a whole level ({device_id}, {device_type} or {parent_id})", sub.Topic, l)
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

// match reports whether topic matches the template and returns what its placeholders name, as
// substrings of topic (no allocation).
func (t *topicTemplate) match(topic string) (f topicFields, ok bool) {
	rest := topic
	for i, l := range t.levels {
		if l == "#" {
			return f, true
		}
		level, tail, more := strings.Cut(rest, "/")
		switch {
		case i == t.device:
			f.device, f.hasDevice = level, true
		case i == t.typ:
			f.typ = level
		case i == t.parent:
			f.parent = level
		case l == "+":
		case l != level:
			return topicFields{}, false
		}
		last := i == len(t.levels)-1
		if last {
			return f, !more
		}
		if !more {
			// The topic ended; only a trailing "#" (which also matches its parent level) may follow.
			if i+1 == len(t.levels)-1 && t.levels[i+1] == "#" {
				return f, true
			}
			return topicFields{}, false
		}
		rest = tail
	}
	return f, true
}

// matchTopic finds the first template matching topic whose payload, if it names one, payload is. ignored:
// the topic is a presence subscription's, but none takes this payload (a last will's topic also carries
// the device's "online", or other words).
func matchTopic(templates []topicTemplate, topic string, payload []byte) (f topicFields, t *topicTemplate, ignored bool) {
	for i := range templates {
		f, ok := templates[i].match(topic)
		if !ok {
			continue
		}
		if p := templates[i].payload; p != "" && !strings.EqualFold(strings.TrimSpace(string(payload)), p) {
			ignored = true
			continue
		}
		return f, &templates[i], false
	}
	return topicFields{}, nil, ignored
}
