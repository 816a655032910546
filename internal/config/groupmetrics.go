package config

// Metrics shapes optional metrics (docs/metrics.md#incident-history).
type Metrics struct {
	// GroupLabel names a registry label (one of history.group_labels) whose values split
	// heartbeatd_devices_by_group; "" = the metric is not served.
	GroupLabel string `yaml:"group_label"`
	// MaxGroups bounds the metric's group values: the rest are counted under group="other".
	MaxGroups int `yaml:"max_groups"`
}

// DefaultMetricsMaxGroups is metrics.max_groups's default.
const DefaultMetricsMaxGroups = 200

func (c *Config) validateMetrics(v *validator) {
	m := c.Metrics
	if m.MaxGroups < 1 || m.MaxGroups > 10000 {
		v.add("metrics.max_groups", "must be 1 to 10000")
	}
	if m.GroupLabel == "" {
		return
	}
	for _, name := range c.History.GroupLabels {
		if name == m.GroupLabel {
			return
		}
	}
	v.add("metrics.group_label", "%q must be one of history.group_labels (%v): the counts are kept only for those", m.GroupLabel, c.History.GroupLabels)
}
