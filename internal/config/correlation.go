package config

import (
	"fmt"
	"strings"
	"time"
)

// Correlation groups interruptions into outages (docs/concepts.md): when at least MinDevices devices that share
// the value of one of By interrupt within Window, one outage_started replaces their repeats.
type Correlation struct {
	// By lists the keys devices are grouped by, each on its own: device_type, parent, or labels.<name>
	// (a label set by PUT /v1/devices/{id}). Empty: correlation is off.
	By         []string      `yaml:"by"`
	MinDevices int           `yaml:"min_devices"`
	Window     time.Duration `yaml:"window"`
	// GroupWait holds a new interruption at most this long while one of its groups may still reach
	// MinDevices, so an outage that strikes at once pages once (0 = publish at once, untagged).
	GroupWait time.Duration `yaml:"group_wait"`
}

// Correlation keys that name no label.
const (
	CorrelateByType   = "device_type"
	CorrelateByParent = "parent"
	// CorrelateByLabel prefixes a label's name: labels.site.
	CorrelateByLabel = "labels."
)

// Defaults of the correlation block, applied when By is set.
const (
	DefaultCorrelationMinDevices = 50
	DefaultCorrelationWindow     = 10 * time.Second
)

// Enabled reports whether interruptions are correlated.
func (c Correlation) Enabled() bool { return len(c.By) > 0 }

func (c *Config) validateCorrelation(v *validator) {
	k := c.Correlation
	seen := map[string]bool{}
	for i, by := range k.By {
		key := fmt.Sprintf("correlation.by[%d]", i)
		switch {
		case by == CorrelateByType, by == CorrelateByParent:
		case strings.HasPrefix(by, CorrelateByLabel) && len(by) > len(CorrelateByLabel):
		default:
			v.add(key, "%q: must be device_type, parent or labels.<name>", by)
		}
		if seen[by] {
			v.add(key, "%q listed twice", by)
		}
		seen[by] = true
	}
	if k.Enabled() {
		v.positiveInt("correlation.min_devices", int64(k.MinDevices))
		v.positive("correlation.window", k.Window)
		v.nonNegative("correlation.group_wait", k.GroupWait)
		if k.GroupWait > k.Window {
			v.add("correlation.group_wait", "%s: longer than correlation.window %s, a held interruption would leave the window it waits for",
				FormatDuration(k.GroupWait), FormatDuration(k.Window))
		}
	}
}

// CorrelationTable describes the correlation settings for check-config.
func (c *Config) CorrelationTable() string {
	k := c.Correlation
	if !k.Enabled() {
		return "correlation: off\n"
	}
	wait := ""
	if k.GroupWait > 0 {
		wait = fmt.Sprintf("; a new interruption waits up to %s for its outage", FormatDuration(k.GroupWait))
	}
	return fmt.Sprintf("correlation: by %s; an outage is %d or more devices of one group interrupted within %s%s\n",
		strings.Join(k.By, ", "), k.MinDevices, FormatDuration(k.Window), wait)
}
