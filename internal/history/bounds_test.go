package history

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// outage publishes one incident of device: interrupted at dl, back after down.
func (f *fixture) outage(device string, dl time.Time, down time.Duration) {
	f.t.Helper()
	f.clock.Set(dl)
	f.publish(f.ev(event.Interrupted, device, dl, 0))
	f.clock.Set(dl.Add(down))
	f.publish(f.recovered(device, dl, dl.Add(down)))
}

func TestMaxIncidentsKeepsTheLatestAndPagesNewestFirst(t *testing.T) {
	eachFixture(t, config.History{MaxIncidents: 5}, func(t *testing.T, f *fixture) {
		for i := range 8 {
			f.outage("busy", f.at(time.Duration(i+1)*time.Hour), time.Minute)
		}
		var opened []time.Time
		cursor := ""
		for pages := 0; ; pages++ {
			require.Less(t, pages, 5, "paging ends")
			page, next, err := f.store.Incidents(context.Background(), "busy", 2, cursor)
			require.NoError(t, err)
			for _, in := range page {
				opened = append(opened, in.Opened)
			}
			if next == "" {
				break
			}
			cursor = next
		}
		want := []time.Time{f.at(8 * time.Hour), f.at(7 * time.Hour), f.at(6 * time.Hour), f.at(5 * time.Hour), f.at(4 * time.Hour)}
		assert.Equal(t, want, opened, "the last 5, newest first")

		_, _, err := f.store.Incidents(context.Background(), "busy", 2, "not-a-cursor")
		require.ErrorIs(t, err, ErrBadRequest)
	})
}

func TestRetentionDropsOldIncidentsAndTheirKeys(t *testing.T) {
	retention := 48 * time.Hour
	eachFixture(t, config.History{Retention: retention}, func(t *testing.T, f *fixture) {
		f.outage("old", f.at(time.Hour), time.Minute)
		f.outage("both", f.at(time.Hour), time.Minute)
		f.outage("both", f.at(40*time.Hour), time.Minute)

		f.clock.Set(f.at(time.Hour + time.Minute + retention + time.Second))
		assert.Empty(t, f.list("old"), "closed longer than retention ago: not shown")
		both := f.list("both")
		require.Len(t, both, 1)
		assert.Equal(t, f.at(40*time.Hour), both[0].Opened)

		// Redis drops the keys by itself: the history retention after its last close, the days after theirs.
		ttl, err := f.rdb.PExpireTime(context.Background(), f.store.keys.device("old")).Result()
		require.NoError(t, err)
		assert.Equal(t, f.at(time.Hour+time.Minute+retention).UnixMilli(), ttl.Milliseconds())
		for key := range testenv.Keyspace(t, f.rdb) {
			ms, err := f.rdb.PExpireTime(context.Background(), key).Result()
			require.NoError(t, err)
			assert.Positive(t, ms, "%s has a lifetime", key)
		}
	})
}

func TestAnOpenIncidentKeepsItsHistoryPastRetention(t *testing.T) {
	eachFixture(t, config.History{Retention: 48 * time.Hour}, func(t *testing.T, f *fixture) {
		dl := f.at(time.Hour)
		f.clock.Set(dl)
		f.publish(f.ev(event.Interrupted, "long", dl, 0))
		ttl, err := f.rdb.PExpireTime(context.Background(), f.store.keys.device("long")).Result()
		require.NoError(t, err)
		assert.Equal(t, time.Duration(-1), ttl, "no expiry while open")
		f.clock.Set(dl.Add(100 * time.Hour))
		got := f.list("long")
		require.Len(t, got, 1)
		assert.Equal(t, int64(100*time.Hour/time.Millisecond), got[0].DownMs)
	})
}

func TestDeviceAvailabilityOnAKnownTimeline(t *testing.T) {
	eachFixture(t, config.History{}, func(t *testing.T, f *fixture) {
		// Known since t0 (the last signal before its first incident); 10 days later: 1h down on
		// day 1, 30 min down ending 2h before now, and a late that was no downtime.
		f.outage("m", f.at(30*time.Second), time.Hour)
		now := f.at(10 * 24 * time.Hour)
		f.outage("m", now.Add(-150*time.Minute), 30*time.Minute)
		f.clock.Set(now.Add(-time.Hour))
		f.publish(f.ev(event.Late, "m", now.Add(-time.Hour), 0))
		f.clock.Set(now.Add(-time.Hour + time.Minute))
		f.publish(f.recovered("m", now.Add(-time.Hour), now.Add(-time.Hour+time.Minute)))

		f.clock.Set(now)
		got, err := f.store.Device(context.Background(), "m")
		require.NoError(t, err)
		day, week := float64(24*60), float64(7*24*60)
		known := float64(10 * 24 * 60) // minutes since first known: t0, its last signal before its first incident
		assert.InDelta(t, 1-30/day, got.Availability["24h"], 1e-9)
		assert.InDelta(t, 1-30/week, got.Availability["7d"], 1e-9)
		assert.InDelta(t, 1-90/known, got.Availability["30d"], 1e-9, "counted from when it was first known, not 30 days")
		assert.Equal(t, 3, got.Incidents30d)
	})
}

func TestACorruptHistoryIsCountedAndStartedAfresh(t *testing.T) {
	eachFixture(t, config.History{}, func(t *testing.T, f *fixture) {
		require.NoError(t, f.rdb.Set(context.Background(), f.store.keys.device("bad"), "\x01\xff\xff", 0).Err())
		_, _, err := f.store.Incidents(context.Background(), "bad", 10, "")
		require.ErrorIs(t, err, errCorrupt)
		f.outage("bad", f.at(time.Hour), time.Minute)
		assert.Len(t, f.list("bad"), 1)
		assert.Equal(t, 2.0, testenv.MetricValue(t, f.store.anomalies.WithLabelValues("corrupt")))
	})
}

func TestCodecRoundTrip(t *testing.T) {
	h := &deviceHistory{Groups: map[string]string{"device_type": "meter", "label.site": "north"}, KnownSince: 1_795_000_000_000,
		Incidents: []Incident{
			{Opened: 1_795_000_030_000, FirstKind: event.Late, Phase: event.Closed, DownFrom: 1_795_000_040_000, Closed: 1_795_000_100_000,
				Repeats: 3, Exhausted: true, AckedAt: 1_795_000_050_000, AckedBy: "bob", Cause: event.CauseOffline, Reason: "lwt",
				Parent: "gw", OutageID: "o/1"},
			{Opened: 1_795_001_000_000, FirstKind: event.Suppressed, Phase: event.SuppressedPhase, DownFrom: 1_795_001_000_000},
			{Opened: 1_795_002_000_000, FirstKind: event.Interrupted, Phase: event.Closed, DownFrom: 1_795_002_000_000,
				Closed: 1_795_002_000_000, Deleted: true},
		}}
	b := encode(h)
	got, err := decode(b)
	require.NoError(t, err)
	assert.Equal(t, h, got)
	assert.Less(t, len(encode(&deviceHistory{Incidents: h.Incidents[1:2]})), 20, "a plain incident is a few bytes")
	for i := range b {
		_, _ = decode(b[:i]) // never panics on a short value
	}
}
