package alarm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/correlate"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// step is fixture.at returning the events themselves.
func (f *fixture) step(d time.Duration) []event.Event {
	f.t.Helper()
	require.NoError(f.t, f.handler.Handle(context.Background(), f.claimOnly(d)))
	return f.sink.Take()
}

// claimOnly moves the clock to t0+d and claims every due device, as a replica does just before it dies.
func (f *fixture) claimOnly(d time.Duration) []deadline.Claim {
	f.t.Helper()
	f.clock.Set(f.t0.Add(d))
	res, err := f.store.Claim(context.Background(), testenv.AllSlots(f.store.Slots()),
		deadline.ClaimOptions{Now: f.clock.Now(), Lease: 30 * time.Second, Batch: 256})
	require.NoError(f.t, err)
	return res.Claims
}

func correlatorFixture(t *testing.T, f *fixture, replica string) *correlate.Correlator {
	t.Helper()
	c := correlate.New(correlate.Options{Client: f.rdb, Store: f.store, Sink: f.sink, ReplicaID: replica, Now: f.clock.Now,
		Correlation: config.Correlation{By: []string{config.CorrelateByType}, MinDevices: 5, Window: 10 * time.Second}})
	require.NotNil(t, c)
	return c
}

// TestCorrelatedOutage: six gateways interrupted within the window are one outage_started; a member
// interrupted after it carries its id; no member repeats while it lasts; outage_ended once fewer than
// half of its seven members are still silent, after which the repeats of the silent ones resume.
func TestCorrelatedOutage(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		corr := correlatorFixture(t, f, "r1")
		f.handler = NewHandler(HandlerOptions{Store: f.store, Sink: f.sink, Policies: f.policies.Load, Correlator: corr, Now: f.clock.Now})
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
		f.clock.Set(f.t0.Add(41 * time.Second))
		require.NoError(t, corr.Tick(ctx))
		require.Empty(t, f.sink.Take(), "4 of 7 members still silent: not fewer than half")
		f.signal(gws[3], "gateway", 41*time.Second)
		require.Len(t, f.at(41*time.Second+5*time.Millisecond), 1, "recovered")
		f.clock.Set(f.t0.Add(42 * time.Second))
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

// TestCorrelatedOutageEndsByAllItsMembers: an outage seen early from its first five members and joined by
// fifteen more ends when fewer than half of its twenty members are still silent, even while more than
// half of the five it started with are: counted against its start alone it would never end.
func TestCorrelatedOutageEndsByAllItsMembers(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		corr := correlatorFixture(t, f, "r1")
		f.handler = NewHandler(HandlerOptions{Store: f.store, Sink: f.sink, Policies: f.policies.Load, Correlator: corr, Now: f.clock.Now})
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
			require.Len(t, f.at(at+5*time.Millisecond), len(devices), "recovered")
			f.clock.Set(f.t0.Add(at + time.Second))
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
		corr := correlatorFixture(t, f, "r1")
		f.handler = NewHandler(HandlerOptions{Store: f.store, Sink: f.sink, Policies: f.policies.Load, Correlator: corr, Now: f.clock.Now})
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

		deadlineAt := f.t0.Add(7 * time.Second) // what a committed claim dates the members' interruption at
		ask := []correlate.Member{{Device: "early", Type: "gateway", InterruptedAt: f.t0.Add(5 * time.Second)}}
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
		corr := correlatorFixture(t, f, "r1")
		join := func(group string, at time.Duration, devices ...string) []correlate.Outage {
			t.Helper()
			groups := make([][]string, len(devices))
			for i := range groups {
				groups[i] = []string{group}
			}
			_, unannounced, err := corr.Join(ctx, devices, groups, f.t0.Add(at))
			require.NoError(t, err)
			return unannounced
		}
		const meters, gateways = "device_type:meter", "device_type:gateway"
		opened := join(meters, 0, "m1", "m2", "m3", "m4", "m5")
		require.Len(t, opened, 1, "the batch that reaches min_devices opens and announces it")
		require.Empty(t, join(meters, 10*time.Millisecond, "m6", "m7"), "announced by the opener meanwhile")
		require.Empty(t, join(meters, 20*time.Millisecond, "m8"))
		f.clock.Set(f.t0.Add(30 * time.Millisecond))
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
		f.sink.down.Store(true)
		failed := join(gateways, 12*time.Second, "g1", "g2", "g3", "g4", "g5")
		require.Len(t, failed, 1)
		require.Error(t, corr.Announce(ctx, failed))
		f.sink.down.Store(false)
		retry := join(gateways, 12*time.Second+10*time.Millisecond, "g6")
		require.Len(t, retry, 1)
		require.Equal(t, failed[0].ID, retry[0].ID)
	})
}
