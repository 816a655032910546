package config

import (
	"regexp"
	"time"
)

// History is how much of each device's past incidents heartbeatd keeps in Redis, for the incident list
// and availability (docs/http-api.md#incidents-and-availability).
type History struct {
	// MaxIncidents is how many of a device's latest incidents are kept.
	MaxIncidents int `yaml:"max_incidents"`
	// Retention drops an incident closed longer ago than this, and a day's availability figures once the
	// day is this old.
	Retention time.Duration `yaml:"retention"`
	// GroupLabels are the registry label names GET /v1/availability may group by (label.<name>): each
	// one costs a per-day figure per device with incidents, so only the named ones are kept.
	GroupLabels []string `yaml:"group_labels"`
	// GroupID is the Kafka consumer group on events.kafka.topic that records the history: every replica
	// joins it, so each event is recorded by one of them, off the alarm path.
	GroupID string `yaml:"group_id"`
}

// The history defaults (docs/configuration.md#history).
const (
	DefaultHistoryMaxIncidents = 50
	DefaultHistoryRetention    = 30 * 24 * time.Hour
	DefaultHistoryGroupID      = "heartbeatd-history"
	// maxHistoryIncidents bounds max_incidents: a device's incidents are one Redis value, rewritten at
	// each of its events.
	maxHistoryIncidents = 1000
	// maxGroupLabels bounds group_labels: each is one more field per device and day.
	maxGroupLabels = 8
)

// groupLabelName is the registry's rule for label names (docs/http-api.md).
var groupLabelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_.-]{0,63}$`)

func (c *Config) validateHistory(v *validator) {
	h := c.History
	if h.MaxIncidents < 1 || h.MaxIncidents > maxHistoryIncidents {
		v.add("history.max_incidents", "must be 1 to %d", maxHistoryIncidents)
	}
	if h.Retention < 24*time.Hour {
		v.add("history.retention", "must be at least 24h")
	}
	if v.required("history.group_id", h.GroupID) && (h.GroupID == c.Ingest.Kafka.GroupID || h.GroupID == c.Notify.GroupID) {
		// One group for two purposes would hand each member's partitions to the other.
		v.add("history.group_id", "%q is ingest.kafka.group_id or notify.group_id too: the history needs a group of its own", h.GroupID)
	}
	if len(h.GroupLabels) > maxGroupLabels {
		v.add("history.group_labels", "at most %d names", maxGroupLabels)
	}
	seen := map[string]bool{}
	for _, name := range h.GroupLabels {
		if !groupLabelName.MatchString(name) {
			v.add("history.group_labels", "%q: a registry label name (a letter or _, then letters, digits, _ . -, at most 64)", name)
		}
		if seen[name] {
			v.add("history.group_labels", "%q is named twice", name)
		}
		seen[name] = true
	}
}
