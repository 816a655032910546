package history

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/pkg/client"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// publishTyped publishes one incident of device of type typ: interrupted at dl, back after down
// (down 0: still open).
func (f *fixture) publishTyped(device, typ string, dl time.Time, down time.Duration) {
	f.t.Helper()
	f.clock.Set(dl)
	e := f.ev(event.Interrupted, device, dl, 0)
	e.DeviceType = typ
	f.publish(e)
	if down > 0 {
		f.clock.Set(dl.Add(down))
		r := f.recovered(device, dl, dl.Add(down))
		r.DeviceType = typ
		f.publish(r)
	}
}

func TestGroupAvailabilityAddsUpTheDays(t *testing.T) {
	eachFixture(t, config.History{GroupLabels: []string{"site"}}, func(t *testing.T, f *fixture) {
		f.labels["g-1"] = map[string]string{"site": "north"}
		f.labels["g-2"] = map[string]string{"site": "north"}
		f.labels["m-1"] = map[string]string{"site": "south"}
		day := 24 * time.Hour
		// The window is the 7 days before now = t0 + 10d. Days 3 to 10 after t0:
		f.publishTyped("g-1", "gateway", f.at(1*day), time.Hour)                // before the window: not counted
		f.publishTyped("g-1", "gateway", f.at(4*day+23*time.Hour), 2*time.Hour) // across midnight: 2h
		f.publishTyped("g-2", "gateway", f.at(5*day), 30*time.Minute)           // 30m
		f.publishTyped("m-1", "meter", f.at(9*day), 0)                          // open since: 1 day by now
		f.publishTyped("g-2", "gateway", f.at(6*day), 90*time.Minute)           // 90m more
		now := f.at(10 * day)
		f.clock.Set(now)
		week := 7 * day

		byType, err := f.store.Groups(context.Background(), GroupQuery{Window: week, GroupBy: "device_type"})
		require.NoError(t, err)
		avail := func(down time.Duration) float64 { return 1 - float64(down)/float64(week) }
		want := []client.AvailabilityGroup{
			{Value: "gateway", Devices: 2, Incidents: 3, DownMs: (4 * time.Hour).Milliseconds(),
				Availability: (avail(2*time.Hour) + avail(2*time.Hour)) / 2,
				LeastAvailable: []client.DeviceAvailability{
					{DeviceID: "g-1", Availability: avail(2 * time.Hour), DownMs: (2 * time.Hour).Milliseconds(), Incidents: 1},
					{DeviceID: "g-2", Availability: avail(2 * time.Hour), DownMs: (2 * time.Hour).Milliseconds(), Incidents: 2}}},
			{Value: "meter", Devices: 1, Incidents: 1, DownMs: day.Milliseconds(), Availability: avail(day),
				LeastAvailable: []client.DeviceAvailability{{DeviceID: "m-1", Availability: avail(day), DownMs: day.Milliseconds(), Incidents: 1}}},
		}
		assert.Equal(t, want, byType)

		bySite, err := f.store.Groups(context.Background(), GroupQuery{Window: week, GroupBy: "label.site"})
		require.NoError(t, err)
		require.Len(t, bySite, 2)
		assert.Equal(t, "north", bySite[0].Value)
		assert.Equal(t, want[0].DownMs, bySite[0].DownMs)
		assert.Equal(t, "south", bySite[1].Value)

		fleet, err := f.store.Groups(context.Background(), GroupQuery{Window: week})
		require.NoError(t, err)
		require.Len(t, fleet, 1)
		assert.Equal(t, 3, fleet[0].Devices)
		assert.Equal(t, int64(4), fleet[0].Incidents)
		assert.Equal(t, "m-1", fleet[0].LeastAvailable[0].DeviceID, "least available first")

		// With the fleet's size, its devices without incidents count as available: 3 with incidents among
		// 100, so the fleet's down time is spread over 100 devices, not 3.
		sized, err := f.store.Groups(context.Background(), GroupQuery{Window: week, FleetSize: 100})
		require.NoError(t, err)
		require.Len(t, sized, 1)
		assert.Equal(t, 100, sized[0].Devices)
		assert.InDelta(t, 1-float64(fleet[0].DownMs)/float64(100*week.Milliseconds()), sized[0].Availability, 1e-9)
		assert.Greater(t, sized[0].Availability, fleet[0].Availability)
		quiet, err := New(Options{Client: f.rdb, KeyPrefix: "quiet"}).Groups(context.Background(), GroupQuery{Window: week, FleetSize: 100})
		require.NoError(t, err)
		assert.Equal(t, []client.AvailabilityGroup{{Devices: 100, Availability: 1, LeastAvailable: []client.DeviceAvailability{}}}, quiet,
			"no incident in the window: the whole fleet available")

		only, err := f.store.Groups(context.Background(), GroupQuery{Window: week, GroupBy: "device_type", Only: "meter"})
		require.NoError(t, err)
		assert.Equal(t, want[1:], only)

		// A device that changes type moves its figures; one deleted takes them away.
		f.clock.Set(now)
		moved := f.ev(event.Interrupted, "g-2", now, 0)
		moved.DeviceType = "meter"
		f.publish(moved)
		del := event.New(event.Deleted, "m-1", "meter", f.at(9*day), time.Time{}, now, 0)
		f.publish(del)
		byType, err = f.store.Groups(context.Background(), GroupQuery{Window: week, GroupBy: "device_type"})
		require.NoError(t, err)
		require.Len(t, byType, 2)
		assert.Equal(t, 1, byType[0].Devices, "gateway: g-1 alone")
		assert.Equal(t, "meter", byType[1].Value)
		assert.Equal(t, []string{"g-2"}, []string{byType[1].LeastAvailable[0].DeviceID})
		assert.Equal(t, int64(3), byType[1].Incidents, "g-2's incidents came with it")

		for _, bad := range []GroupQuery{{Window: week, GroupBy: "label.room"}, {Window: week, GroupBy: "parent"},
			{Window: 31 * day}, {Window: 0}} {
			_, err := f.store.Groups(context.Background(), bad)
			assert.ErrorIs(t, err, ErrBadRequest, "%+v", bad)
		}
	})
}

func TestOpenIncidentsCountedByGroup(t *testing.T) {
	eachFixture(t, config.History{GroupLabels: []string{"site"}}, func(t *testing.T, f *fixture) {
		for i, site := range []string{"north", "north", "south"} {
			f.labels["o-"+strconv.Itoa(i)] = map[string]string{"site": site}
		}
		dl := f.at(time.Hour)
		f.publishTyped("o-0", "meter", dl, 0)
		f.publishTyped("o-1", "meter", dl, 0)
		f.publishTyped("o-2", "gateway", dl, 0)
		f.publishTyped("o-3", "meter", dl, time.Minute) // recovered: no longer counted
		ctx := context.Background()
		count := func(by string) map[string]int64 {
			got, err := f.store.OpenByGroup(ctx, by)
			require.NoError(t, err)
			return got
		}
		assert.Equal(t, map[string]int64{"meter": 2, "gateway": 1}, count("device_type"))
		assert.Equal(t, map[string]int64{"north": 2, "south": 1}, count("label.site"))

		// A recovery, a move to another site, a deletion, and everything published again.
		f.clock.Set(dl.Add(2 * time.Minute))
		f.publish(f.recovered("o-0", dl, dl.Add(2*time.Minute)))
		f.labels["o-1"] = map[string]string{"site": "south"}
		ack := f.ev(event.Acked, "o-1", dl, 0)
		f.publish(ack)
		f.publish(event.New(event.Deleted, "o-2", "gateway", dl, time.Time{}, f.clock.Now(), 0))
		f.publish(f.kafka.All()...)
		assert.Equal(t, map[string]int64{"meter": 1}, count("device_type"))
		assert.Equal(t, map[string]int64{"south": 1}, count("label.site"))

		_, err := f.store.OpenByGroup(ctx, "label.room")
		require.ErrorIs(t, err, ErrBadRequest)
	})
}

func TestGroupMetricIsBounded(t *testing.T) {
	eachFixture(t, config.History{GroupLabels: []string{"site"}}, func(t *testing.T, f *fixture) {
		// 5 sites, site-0 with 5 devices down … site-4 with 1: the 3 largest, the rest under other.
		n := 0
		for site := range 5 {
			for range 5 - site {
				dev := "m-" + strconv.Itoa(n)
				n++
				f.labels[dev] = map[string]string{"site": "site-" + strconv.Itoa(site)}
				f.publishTyped(dev, "meter", f.at(time.Hour), 0)
			}
		}
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(NewGroupCollector(f.store, "site", 3))
		families, err := reg.Gather()
		require.NoError(t, err)
		require.Len(t, families, 1)
		require.Equal(t, "heartbeatd_devices_by_group", families[0].GetName())
		got := map[string]float64{}
		for _, m := range families[0].GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			require.Equal(t, "interrupted", labels["state"])
			got[labels["group"]] = m.GetGauge().GetValue()
		}
		assert.Equal(t, map[string]float64{"site-0": 5, "site-1": 4, "site-2": 3, "other": 3}, got)
	})
}
