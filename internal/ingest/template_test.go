package ingest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTopicTemplates(t *testing.T) {
	for _, tc := range []struct {
		sub    Subscription
		filter string
		topic  string
		device string
		typ    string
		ok     bool
	}{
		{Subscription{Topic: "devices/{device_id}/heartbeat"}, "devices/+/heartbeat", "devices/d1/heartbeat", "d1", "", true},
		{Subscription{Topic: "devices/{device_id}/heartbeat"}, "devices/+/heartbeat", "devices/d1/other", "", "", false},
		{Subscription{Topic: "devices/{device_id}/heartbeat"}, "devices/+/heartbeat", "devices/d1/heartbeat/x", "", "", false},
		{Subscription{Topic: "devices/{device_id}/heartbeat"}, "devices/+/heartbeat", "devices/d1", "", "", false},
		{Subscription{Topic: "devices/{device_id}/heartbeat"}, "devices/+/heartbeat", "devices//heartbeat", "", "", true},
		{Subscription{Topic: "fleet/{device_type}/{device_id}/telemetry", SharedGroup: "hb"}, "$share/hb/fleet/+/+/telemetry",
			"fleet/gateway/gw-1/telemetry", "gw-1", "gateway", true},
		{Subscription{Topic: "site/+/{device_id}/#"}, "site/+/+/#", "site/a/d9/x/y", "d9", "", true},
		{Subscription{Topic: "site/+/{device_id}/#"}, "site/+/+/#", "site/a/d9", "d9", "", true},
		{Subscription{Topic: "site/+/{device_id}/#"}, "site/+/+/#", "site/a", "", "", false},
		{Subscription{Topic: "bare"}, "bare", "bare", "", "", true},
		{Subscription{Topic: "gw/{parent_id}/{device_id}/hb"}, "gw/+/+/hb", "gw/gw-7/s-1/hb", "s-1", "", true},
	} {
		tpl, err := parseTemplate(tc.sub)
		require.NoError(t, err, tc.sub.Topic)
		require.Equal(t, tc.filter, tpl.filter)
		f, ok := tpl.match(tc.topic)
		require.Equal(t, tc.ok, ok, "%s ~ %s", tc.sub.Topic, tc.topic)
		if ok {
			require.Equal(t, tc.device, f.device, tc.topic)
			require.Equal(t, tc.typ, f.typ, tc.topic)
		}
	}
	gw, err := parseTemplate(Subscription{Topic: "gw/{parent_id}/{device_id}/hb"})
	require.NoError(t, err)
	f, ok := gw.match("gw/gw-7/s-1/hb")
	require.True(t, ok)
	require.Equal(t, topicFields{device: "s-1", parent: "gw-7", hasDevice: true}, f)
	for _, bad := range []Subscription{
		{Topic: ""},
		{Topic: "a/x{device_id}/b"},
		{Topic: "a/{device_id}/{device_id}"},
		{Topic: "a/{parent_id}/{parent_id}/{device_id}"},
		{Topic: "a/#/b"},
		{Topic: "a/b+/c"},
		{Topic: "$share/g/a/{device_id}"},
		{Topic: "a/{device_id}", SharedGroup: "g/h"},
	} {
		_, err := parseTemplate(bad)
		require.Error(t, err, "%+v", bad)
	}
}

func TestOffsetTrackerCommitsOnlyContiguousAppliedOffsets(t *testing.T) {
	tr := newOffsetTracker()
	a0 := tr.add(topicPartition{"s", 0}, time.Now(), []int64{10})
	a1 := tr.add(topicPartition{"s", 0}, time.Now(), []int64{11})
	a2 := tr.add(topicPartition{"s", 0}, time.Now(), []int64{13}) // a gap (compaction, transaction marker) is fine
	b0 := tr.add(topicPartition{"s", 1}, time.Now(), []int64{5})

	a1()
	a2()
	require.Empty(t, tr.committable(), "offset 10 is unapplied: nothing past it")
	b0()
	require.Equal(t, map[topicPartition]int64{{"s", 1}: 5}, tr.committable())
	a0()
	got := tr.committable()
	require.Equal(t, map[topicPartition]int64{{"s", 0}: 13, {"s", 1}: 5}, got)
	tr.committed(got)
	require.Empty(t, tr.committable())
	require.Zero(t, tr.outstanding())

	// A rebalance hands partition 0 back from an earlier offset: the old run's late acks commit nothing.
	late := tr.add(topicPartition{"s", 0}, time.Now(), []int64{14})
	r0 := tr.add(topicPartition{"s", 0}, time.Now(), []int64{12})
	late()
	require.Empty(t, tr.committable())
	r0()
	require.Equal(t, map[topicPartition]int64{{"s", 0}: 12}, tr.committable())

	// A fetched run shares one acknowledgement, called once by each of its messages: it commits only
	// once every one of them called it.
	run := tr.add(topicPartition{"s", 2}, time.Now(), []int64{7, 8, 9})
	run()
	run()
	require.NotContains(t, tr.committable(), topicPartition{"s", 2})
	require.Equal(t, 3, tr.outstanding(), "the run counts its three messages until all are acknowledged")
	run()
	require.Equal(t, int64(9), tr.committable()[topicPartition{"s", 2}])
}
