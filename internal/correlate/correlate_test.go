package correlate_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/alarm"
	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/correlate"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/internal/testenv/deadlinetest"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// TestMain stops the Redis Cluster the tests share (see testenv.RedisBackends).
func TestMain(m *testing.M) { testenv.Main(m) }

// fixture is the shared one (deadlinetest.Fixture) with a correlator grouping gateways by type,
// min_devices 5 within 10s, and the alarm loop's handler in front of it, as the daemon wires them: the
// handler turns the claims of silent gateways (timeout 5s) into the interruptions the correlator groups.
type fixture struct {
	*deadlinetest.Fixture
	t       *testing.T
	sink    *testenv.EventLog
	corr    *correlate.Correlator
	handler *alarm.Handler
	metrics *correlate.Metrics
}

func eachFixture(t *testing.T, test func(t *testing.T, f *fixture)) {
	t.Helper()
	cfg, err := config.Parse([]byte("types: {default: {timeout: 10s}, gateway: {timeout: 5s, repeat_every: 30s}}"),
		func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	policies := cfg.Policies()
	timeout := func(typ string) time.Duration { p, _ := policies.Lookup(typ); return p.Timeout }
	repeat := func(typ string) time.Duration { p, _ := policies.Lookup(typ); return p.RepeatEvery }
	deadlinetest.Each(t, deadline.Options{Slots: 8, Timeout: timeout, RepeatEvery: repeat}, policies.Names(),
		func(t *testing.T, base *deadlinetest.Fixture) {
			f := &fixture{Fixture: base, t: t, sink: &testenv.EventLog{}, metrics: correlate.NewMetrics(nil)}
			f.corr = correlate.New(correlate.Options{Client: f.RDB, Store: f.Store, Sink: f.sink, ReplicaID: "r1", Now: f.Clock.Now,
				Correlation: config.Correlation{By: []string{config.CorrelateByType}, MinDevices: 5, Window: 10 * time.Second},
				Metrics:     f.metrics})
			require.NotNil(t, f.corr)
			f.handler = alarm.NewHandler(alarm.HandlerOptions{Store: f.Store, Sink: f.sink, Policies: func() *config.Policies { return policies },
				Correlator: f.corr, Now: f.Clock.Now})
			test(t, f)
		})
}

// signal records a signal of device at the given offset from T0.
func (f *fixture) signal(device, typ string, at time.Duration) {
	f.t.Helper()
	f.Signal(f.t, device, typ, at)
}

// step moves the clock to T0+d, hands every due claim to the handler and returns the events published.
func (f *fixture) step(d time.Duration) []event.Event {
	f.t.Helper()
	f.Clock.Set(f.T0.Add(d))
	require.NoError(f.t, f.handler.Handle(context.Background(), f.ClaimAll(f.t, deadline.ClaimOptions{}).Claims))
	return f.sink.Take()
}

// heartbeatd_outages_open is registered at 0 without a correlator (correlation off), so alerts and
// dashboards on it need no "absent" case; with one it is 1 while an outage lasts and 0 once it ended.
func TestOutagesOpenFollowsTheOutages(t *testing.T) {
	off := prometheus.NewRegistry()
	m := correlate.NewMetrics(off)
	require.Nil(t, correlate.New(correlate.Options{Metrics: m}), "correlation off")
	mfs, err := off.Gather()
	require.NoError(t, err)
	require.Len(t, mfs, 1)
	require.Equal(t, "heartbeatd_outages_open", mfs[0].GetName())
	require.Zero(t, mfs[0].GetMetric()[0].GetGauge().GetValue())

	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		open := func() float64 { return testenv.MetricValue(t, f.metrics.OutagesOpen) }
		var gws []string
		for i := range 5 {
			gws = append(gws, fmt.Sprintf("gw%d", i))
			f.signal(gws[i], "gateway", 0)
		}
		require.Len(t, f.step(5*time.Second+5*time.Millisecond), 6, "outage_started and its five members")
		require.NoError(t, f.corr.Tick(ctx))
		require.Equal(t, 1.0, open())

		for _, d := range gws {
			f.signal(d, "gateway", 10*time.Second)
		}
		require.Len(t, f.step(10*time.Second+5*time.Millisecond), 5, "recovered")
		f.Clock.Set(f.T0.Add(12 * time.Second))
		require.NoError(t, f.corr.Tick(ctx)) // ends it
		require.NoError(t, f.corr.Tick(ctx))
		require.Equal(t, []event.Kind{event.OutageEnded}, testenv.Kinds(f.sink.Take()))
		require.Zero(t, open())
	})
}

// TestCorrelatedOutageEndsByAllItsMembers: an outage seen early from its first five members and joined by
// fifteen more ends when fewer than half of its twenty members are still silent, even while more than
// half of the five it started with are: counted against its start alone it would never end.
func TestCorrelatedOutageEndsByAllItsMembers(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		corr := f.corr
		ctx := context.Background()
		var first, later []string
		for i := range 5 {
			first = append(first, fmt.Sprintf("first%d", i))
			f.signal(first[i], "gateway", 0) // timeout 5s
		}
		for i := range 15 {
			later = append(later, fmt.Sprintf("later%02d", i))
			f.signal(later[i], "gateway", 2*time.Second)
		}
		started := f.step(5*time.Second + 5*time.Millisecond)
		require.Len(t, started, 6, "outage_started and its five members")
		require.Equal(t, event.OutageStarted, started[0].Kind)
		require.Equal(t, 5, started[0].Count)
		joined := f.step(7*time.Second + 5*time.Millisecond)
		require.Len(t, joined, 15)
		for _, e := range joined {
			require.Equal(t, started[0].OutageID, e.OutageID, "%s joined the outage", e.DeviceID)
		}

		back := func(devices []string, at time.Duration) {
			for _, d := range devices {
				f.signal(d, "gateway", at)
			}
			require.Len(t, f.step(at+5*time.Millisecond), len(devices), "recovered")
			f.Clock.Set(f.T0.Add(at + time.Second))
			require.NoError(t, corr.Tick(ctx))
		}
		back(later[:10], 20*time.Second)
		require.Empty(t, f.sink.Take(), "10 of 20 members still silent: not fewer than half")
		back(later[10:11], 22*time.Second)
		ended := f.sink.Take()
		require.Len(t, ended, 1, "9 of 20 members still silent: fewer than half, though all 5 of the start are")
		require.Equal(t, event.OutageEnded, ended[0].Kind)
		require.Equal(t, started[0].OutageID, ended[0].OutageID)
		require.Equal(t, 9, ended[0].Count, "outage_ended counts the members still silent")
		outages, err := corr.Outages(ctx)
		require.NoError(t, err)
		require.Len(t, outages, 1)
		require.Equal(t, "ended", outages[0].State)
		require.Equal(t, 5, outages[0].Count, "count stays the outage's count at its start")
		require.Equal(t, 20, outages[0].Members, "the members the end rule counted")
		require.Equal(t, 9, outages[0].Silent)
	})
}

// TestOutageMembersKnownBeforeTheirStateSaysSo: a re-read that asks which outage covers an incident
// (the Alertmanager re-sync) counts the members that opened or joined an outage by the group's record,
// even while their state still dates the interruption at its deadline (committed by the claim, before
// the alarm loop's acknowledgement); a device interrupted before the outage began stays outside it.
func TestOutageMembersKnownBeforeTheirStateSaysSo(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		corr := f.corr
		f.signal("early", "gateway", 0)
		var gws []string
		for i := range 5 {
			gws = append(gws, fmt.Sprintf("gw%d", i))
			f.signal(gws[i], "gateway", 2*time.Second)
		}
		require.Len(t, f.step(5*time.Second+5*time.Millisecond), 1, "the early one alone: paged as it is")
		batch := f.step(7*time.Second + 5*time.Millisecond)
		require.Equal(t, event.OutageStarted, batch[0].Kind)
		id := batch[0].OutageID

		deadlineAt := f.T0.Add(7 * time.Second) // what a committed claim dates the members' interruption at
		ask := []correlate.Member{{Device: "early", Type: "gateway", InterruptedAt: f.T0.Add(5 * time.Second)}}
		for _, gw := range gws {
			ask = append(ask, correlate.Member{Device: gw, Type: "gateway", InterruptedAt: deadlineAt})
		}
		_, covering, err := corr.Covering(context.Background(), ask)
		require.NoError(t, err)
		require.Equal(t, "", covering[0], "interrupted before the outage began")
		for i := range gws {
			require.Equal(t, id, covering[i+1], "%s joined the outage when it opened", gws[i])
		}
	})
}

// While one batch of an outage's members announces it, the other batches (of every scanner loop and
// replica) do not announce it too: one outage_started, unless its announcer died or failed.
func TestOutageAnnouncedOnceWhileMembersArriveInBatches(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		corr := f.corr
		join := func(group string, at time.Duration, devices ...string) []correlate.Outage {
			t.Helper()
			groups := make([][]string, len(devices))
			for i := range groups {
				groups[i] = []string{group}
			}
			_, unannounced, err := corr.Join(ctx, devices, groups, f.T0.Add(at))
			require.NoError(t, err)
			return unannounced
		}
		const meters, gateways = "device_type:meter", "device_type:gateway"
		opened := join(meters, 0, "m1", "m2", "m3", "m4", "m5")
		require.Len(t, opened, 1, "the batch that reaches min_devices opens and announces it")
		require.Empty(t, join(meters, 10*time.Millisecond, "m6", "m7"), "announced by the opener meanwhile")
		require.Empty(t, join(meters, 20*time.Millisecond, "m8"))
		f.Clock.Set(f.T0.Add(30 * time.Millisecond))
		require.NoError(t, corr.Tick(ctx))
		require.Empty(t, f.sink.Take(), "nor by the correlator's tick")

		// The opener died before announcing: once its lease ran out, the next batch announces it.
		again := join(meters, 10*time.Second, "m9")
		require.Len(t, again, 1)
		require.Equal(t, opened[0].ID, again[0].ID)
		require.NoError(t, corr.Announce(ctx, again))
		require.Len(t, f.sink.Take(), 1)
		require.Empty(t, join(meters, 11*time.Second, "m10"), "announced")

		// A failed announcement is handed back at once: the next batch announces it.
		f.sink.SetDown(true)
		failed := join(gateways, 12*time.Second, "g1", "g2", "g3", "g4", "g5")
		require.Len(t, failed, 1)
		require.Error(t, corr.Announce(ctx, failed))
		f.sink.SetDown(false)
		retry := join(gateways, 12*time.Second+10*time.Millisecond, "g6")
		require.Len(t, retry, 1)
		require.Equal(t, failed[0].ID, retry[0].ID)
	})
}
