package alarm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/correlate"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// withCorrelation gives f a handler whose correlator groups by type, min_devices 5 within 10s, with
// groupWait, both counting their events in m (nil: uncounted), and returns the correlator.
func withCorrelation(t *testing.T, f *fixture, groupWait time.Duration, m *Metrics) *correlate.Correlator {
	t.Helper()
	opts := correlate.Options{Client: f.RDB, Store: f.Store, Sink: f.sink, ReplicaID: "r1", Now: f.Clock.Now,
		Correlation: config.Correlation{By: []string{config.CorrelateByType}, MinDevices: 5, Window: 10 * time.Second, GroupWait: groupWait}}
	if m != nil {
		opts.Events = m.Events
	}
	corr := correlate.New(opts)
	require.NotNil(t, corr)
	f.handler = NewHandler(HandlerOptions{Store: f.Store, Sink: f.sink, Policies: f.policies.Load, Correlator: corr, Now: f.Clock.Now,
		Metrics: m})
	return corr
}

// TestCorrelatedOutage: six gateways interrupted within the window are one outage_started; a member
// interrupted after it carries its id; no member repeats while it lasts; outage_ended once fewer than
// half of its seven members are still silent, after which the repeats of the silent ones resume.
func TestCorrelatedOutage(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		corr := withCorrelation(t, f, 0, nil)
		ctx := context.Background()
		var gws []string
		for i := range 6 {
			gws = append(gws, fmt.Sprintf("gw%d", i))
			f.signal(gws[i], "gateway", 0) // timeout 5s, repeat 30s
		}
		f.signal("late", "gateway", 2*time.Second)
		batch := f.step(5*time.Second + 5*time.Millisecond)
		require.Len(t, batch, 7)
		o := batch[0]
		require.Equal(t, event.OutageStarted, o.Kind, "judged as the interruptions are decided, announced before its members")
		require.Equal(t, "outage:device_type:gateway", o.DeviceID)
		require.Equal(t, &event.Group{By: "device_type", Value: "gateway"}, o.Group)
		require.Equal(t, 6, o.Count)
		require.Len(t, o.Sample, 6)
		for _, e := range batch[1:] {
			require.Equal(t, []any{event.Interrupted, o.OutageID}, []any{e.Kind, e.OutageID}, "%s is paged with its outage", e.DeviceID)
		}
		require.NoError(t, corr.Tick(ctx))
		require.NoError(t, corr.Tick(ctx))
		require.Empty(t, f.sink.Take(), "announced once")

		late := f.step(7*time.Second + 5*time.Millisecond)
		require.Len(t, late, 1)
		require.Equal(t, event.Interrupted, late[0].Kind)
		require.Equal(t, o.OutageID, late[0].OutageID, "a member interrupted after outage_started carries its id")
		outages, err := corr.Outages(ctx)
		require.NoError(t, err)
		require.Len(t, outages, 1)
		require.Equal(t, o.OutageID, outages[0].ID)

		require.Empty(t, f.at(35*time.Second+10*time.Millisecond), "no member repeats while the outage lasts")

		for _, d := range gws[:3] {
			f.signal(d, "gateway", 40*time.Second)
		}
		require.Len(t, f.at(40*time.Second+5*time.Millisecond), 3, "recovered")
		f.Clock.Set(f.T0.Add(41 * time.Second))
		require.NoError(t, corr.Tick(ctx))
		require.Empty(t, f.sink.Take(), "4 of 7 members still silent: not fewer than half")
		f.signal(gws[3], "gateway", 41*time.Second)
		require.Len(t, f.at(41*time.Second+5*time.Millisecond), 1, "recovered")
		f.Clock.Set(f.T0.Add(42 * time.Second))
		require.NoError(t, corr.Tick(ctx))
		ended := f.sink.Take()
		require.Len(t, ended, 1, "3 of 7 members still silent: fewer than half, though half of the 6 at the start")
		require.Equal(t, event.OutageEnded, ended[0].Kind)
		require.Equal(t, o.OutageID, ended[0].OutageID)
		require.Equal(t, 3, ended[0].Count, "gw4, gw5 and late are still silent")
		outages, err = corr.Outages(ctx)
		require.NoError(t, err)
		require.Equal(t, "ended", outages[0].State)
		require.NoError(t, corr.Tick(ctx))
		require.Empty(t, f.sink.Take(), "the ended outage's interruptions do not open another")

		alive := func(at time.Duration) { // the recovered ones keep signalling (timeout 5s)
			for _, d := range gws[:4] {
				f.signal(d, "gateway", at)
			}
		}
		alive(64 * time.Second)
		require.Equal(t, []string{"gw4 alarm 1", "gw5 alarm 1"}, f.at(65*time.Second+10*time.Millisecond),
			"the repeats resume once the outage ended: gw4's and gw5's skipped one, one interval after it was due")
		alive(68 * time.Second)
		require.Equal(t, []string{"late alarm 1"}, f.at(70*time.Second+10*time.Millisecond))
	})
}
