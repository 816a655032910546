package history

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// groupCollectTimeout bounds a scrape's read of the open-incident counts.
const groupCollectTimeout = 2 * time.Second

// otherGroup is the group the values beyond max_groups are added up under.
const otherGroup = "other"

// GroupCollector serves heartbeatd_devices_by_group{state, group}: the devices with an open incident per
// value of one kept label (metrics.group_label), read from the counts the history keeps at each scrape
// (64 hash reads, no walk). At most maxGroups values, the largest; the rest are added up under
// group="other", so the series stay bounded whatever values the registry holds.
type GroupCollector struct {
	store     *Store
	groupBy   string
	maxGroups int
	desc      *prometheus.Desc
}

// NewGroupCollector returns the collector of label's groups; register it once.
func NewGroupCollector(s *Store, label string, maxGroups int) *GroupCollector {
	return &GroupCollector{store: s, groupBy: labelDim(label), maxGroups: max(maxGroups, 1),
		desc: prometheus.NewDesc("heartbeatd_devices_by_group",
			"Devices with an open incident (state interrupted: late, suppressed or interrupted) by value of the label metrics.group_label, "+
				"the largest metrics.max_groups values, the rest under group=\"other\"; the same on every replica.",
			[]string{"state", "group"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *GroupCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector. A failed read leaves the series out of this scrape (logged):
// the scrape's other metrics still answer.
func (c *GroupCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), groupCollectTimeout)
	defer cancel()
	counts, err := c.store.OpenByGroup(ctx, c.groupBy)
	if err != nil {
		c.store.log.Warn("heartbeatd_devices_by_group left out of this scrape", zap.Error(err))
		return
	}
	for group, n := range topGroups(counts, c.maxGroups) {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), "interrupted", group)
	}
}

// topGroups keeps the limit largest counts (ties by name) and adds the rest up under otherGroup.
func topGroups(counts map[string]int64, limit int) map[string]int64 {
	if len(counts) <= limit {
		return counts
	}
	names := make([]string, 0, len(counts))
	for g := range counts {
		names = append(names, g)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(counts[b], counts[a]), cmp.Compare(a, b)) })
	out := make(map[string]int64, limit+1)
	for i, g := range names {
		if i < limit {
			out[g] = counts[g]
		} else {
			out[otherGroup] += counts[g]
		}
	}
	return out
}
