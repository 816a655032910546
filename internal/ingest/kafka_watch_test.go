package ingest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var watchT0 = time.UnixMilli(1_763_800_000_000)

// watchAt is watchT0 + d.
func watchAt(d time.Duration) time.Time { return watchT0.Add(d) }

// observe folds one observation of partition p0 of topic "s": its end and committed offsets, the group
// stable (and this reader not rebalanced) unless unstable, with member tags.
func observe(g *groupWatch, at time.Duration, end, committed int64, unstable bool, tags ...string) {
	tp := topicPartition{"s", 0}
	o := observation{at: watchAt(at), ends: map[topicPartition]int64{tp: end}, committed: map[topicPartition]int64{tp: committed},
		state: groupStable, tags: map[string]bool{}, rebalanced: unstable}
	for _, t := range tags {
		o.tags[t] = true
	}
	g.fold(o)
}

// lagAt is the watch's lag at watchT0 + d.
func lagAt(g *groupWatch, d time.Duration) time.Duration {
	lag, _, _ := g.status(watchAt(d), time.Minute)
	return lag
}

// TestGroupWatchLag: the lag is how long the oldest unread record may have waited, from the last
// observation at which it did not exist yet, whatever its timestamp says; a backlog already there at the
// first observation is aged by its oldest record's timestamp, never later than that observation.
func TestGroupWatchLag(t *testing.T) {
	g := newGroupWatch(time.Now)
	observe(g, 0, 10, 10, false)
	require.Zero(t, lagAt(g, 500*time.Millisecond), "caught up")
	observe(g, time.Second, 15, 10, false) // 5 records appended after t0, none read
	require.Equal(t, 1500*time.Millisecond, lagAt(g, 1500*time.Millisecond), "unread since the last observation without them")
	observe(g, 2*time.Second, 15, 12, false)
	require.Equal(t, 2500*time.Millisecond, lagAt(g, 2500*time.Millisecond), "record 12 may have waited since t0")
	observe(g, 3*time.Second, 16, 16, false)
	require.Zero(t, lagAt(g, 3500*time.Millisecond))
	require.Empty(t, g.needRecordTimes(), "no record needs reading while marks tell")

	// A backlog older than the first observation: its oldest record's timestamp tells how old.
	b := newGroupWatch(time.Now)
	observe(b, 0, 100, 40, false)
	require.Equal(t, map[topicPartition]int64{{"s", 0}: 40}, b.needRecordTimes())
	require.Equal(t, time.Second, lagAt(b, time.Second), "until its record is read: from the first observation")
	b.recordTime(topicPartition{"s", 0}, 40, watchAt(-time.Hour))
	require.Empty(t, b.needRecordTimes())
	require.Equal(t, time.Hour+time.Second, lagAt(b, time.Second))
	b.recordTime(topicPartition{"s", 0}, 40, watchAt(time.Hour)) // a producer clock ahead
	require.Equal(t, time.Second, lagAt(b, time.Second), "never later than the first observation")
}

// TestGroupWatchOldTimestampIsNoLag: a record just appended with a timestamp an hour old (a device that
// buffered, a producer clock behind) is no lag: it was read within an observation of its arrival.
func TestGroupWatchOldTimestampIsNoLag(t *testing.T) {
	g := newGroupWatch(time.Now)
	observe(g, 0, 10, 10, false)
	observe(g, 500*time.Millisecond, 11, 10, false)
	require.Empty(t, g.needRecordTimes())
	require.Equal(t, 600*time.Millisecond, lagAt(g, 600*time.Millisecond))
	observe(g, time.Second, 11, 11, false)
	require.Zero(t, lagAt(g, time.Second))
}

// TestGroupWatchRebalance: a rebalance is blind from the quiet observation before the last one before
// it until every partition is read past the first quiet observation after it (the new assignment in
// place).
func TestGroupWatchRebalance(t *testing.T) {
	g := newGroupWatch(time.Now)
	blindAt := func(d time.Duration) time.Time {
		_, blind, _ := g.status(watchAt(d), time.Minute)
		return blind
	}
	observe(g, 0, 10, 10, false)
	require.True(t, blindAt(0).IsZero())
	observe(g, time.Second, 12, 10, true) // this reader started a new generation
	require.Equal(t, watchT0, blindAt(time.Second))
	observe(g, 2*time.Second, 14, 11, false) // settled at t0+2s; offset 12, 13 not read yet
	require.Equal(t, watchT0, blindAt(2*time.Second))
	observe(g, 3*time.Second, 15, 13, false)
	require.Equal(t, watchT0, blindAt(3*time.Second), "read past t0+1s, not past t0+2s")
	observe(g, 4*time.Second, 15, 14, false)
	require.True(t, blindAt(4*time.Second).IsZero(), "read past the settling")

	// A group seen rebalancing (another member joined or left) is blind the same way.
	tp := topicPartition{"s", 0}
	g.fold(observation{at: watchAt(5 * time.Second), ends: map[topicPartition]int64{tp: 15}, committed: map[topicPartition]int64{tp: 15},
		state: "PreparingRebalance"})
	require.Equal(t, watchAt(3*time.Second), blindAt(5*time.Second))
	observe(g, 6*time.Second, 15, 15, false)
	require.True(t, blindAt(6*time.Second).IsZero(), "caught up at once")

	// A rebalance over before the group was described looks quiet; this reader's new generation,
	// reported a moment later, shows it at the next observation: blind from the quiet one before.
	observe(g, 7*time.Second, 15, 15, false)
	observe(g, 8*time.Second, 15, 15, false) // the group already Stable again
	observe(g, 9*time.Second, 15, 15, true)
	require.Equal(t, watchAt(7*time.Second), blindAt(9*time.Second))

	// The first observation is this process joining: blind from when it started.
	j := newGroupWatch(time.Now)
	j.failed(errTest)
	observe(j, time.Second, 5, 5, true)
	_, blind, _ := j.status(watchAt(time.Second), time.Minute)
	require.False(t, blind.IsZero())
}

var errTest = errorString("broker unreachable")

type errorString string

func (e errorString) Error() string { return string(e) }

// TestGroupWatchStale: a group not observed for longer than stale is blind from its last observation.
func TestGroupWatchStale(t *testing.T) {
	g := newGroupWatch(time.Now)
	observe(g, 0, 10, 10, false)
	_, blind, _ := g.status(watchAt(5*time.Second), 5*time.Second)
	require.True(t, blind.IsZero())
	g.failed(errTest)
	_, blind, why := g.status(watchAt(6*time.Second), 5*time.Second)
	require.Equal(t, watchT0, blind)
	require.Contains(t, why, "broker unreachable")
}

// TestGroupWatchTakenOver: a dead member's partitions are read again once the group is stable without
// its tag, no rebalance is pending, and every partition is read past its death.
func TestGroupWatchTakenOver(t *testing.T) {
	g := newGroupWatch(time.Now)
	died := watchAt(time.Second)
	observe(g, 0, 10, 10, false, "a/1", "b/1")
	observe(g, 2*time.Second, 20, 12, false, "a/1", "b/1")
	require.False(t, g.takenOver("a/1", died), "still a member")
	observe(g, 3*time.Second, 22, 12, true, "b/1")
	require.False(t, g.takenOver("a/1", died), "rebalancing")
	observe(g, 4*time.Second, 24, 20, false, "b/1")
	require.False(t, g.takenOver("a/1", died), "its backlog is not read yet")
	observe(g, 5*time.Second, 25, 24, false, "b/1")
	require.True(t, g.takenOver("a/1", died))
	require.False(t, g.takenOver("a/1", watchAt(10*time.Second)), "not observed since")
}

// TestGroupWatchReadUpTo: the group has read everything up to its last observation, or up to where its
// oldest unread record may have begun to wait.
func TestGroupWatchReadUpTo(t *testing.T) {
	g := newGroupWatch(time.Now)
	require.True(t, g.readUpTo().IsZero(), "not observed yet")
	observe(g, 0, 10, 10, false)
	observe(g, time.Second, 10, 10, false)
	require.Equal(t, watchAt(time.Second), g.readUpTo())
	observe(g, 2*time.Second, 12, 10, false)
	observe(g, 3*time.Second, 14, 10, false)
	require.Equal(t, watchAt(time.Second), g.readUpTo(), "unread since after t0+1s")
}
