package silence

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/slotlayout"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/internal/testenv/deadlinetest"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// acts publishes the silences' acts into the fixture's log, as internal/alarm's Acts publishes them to
// Kafka; the log can be told to refuse them, like an unreachable Kafka.
type acts struct{ *testenv.EventLog }

func (a acts) Publish(ctx context.Context, e event.Event) bool {
	return a.EventLog.Publish(ctx, []event.Event{e})[0] == nil
}

type fixture struct {
	*deadlinetest.Fixture
	t    *testing.T
	sink *testenv.EventLog
}

// TestMain stops the Redis Cluster the tests share (see testenv.RedisBackends).
func TestMain(m *testing.M) { testenv.Main(m) }

// eachFixture runs test once per Redis backend, each time on an empty Redis with a fresh fixture.
func eachFixture(t *testing.T, test func(t *testing.T, f *fixture)) {
	t.Helper()
	timeouts := testenv.TypeTimeouts(map[string]time.Duration{"default": 10 * time.Second, "gateway": 5 * time.Second})
	deadlinetest.Each(t, deadline.Options{Slots: 8, Timeout: timeouts}, []string{"default", "gateway"},
		func(t *testing.T, base *deadlinetest.Fixture) {
			test(t, &fixture{Fixture: base, t: t, sink: &testenv.EventLog{}})
		})
}

// replica is a silence store on the fixture's Redis, as on one heartbeatd replica, wired as the daemon
// wires it: it names devices' types, re-arms what it deferred and publishes its acts.
func (f *fixture) replica() *Silences {
	return New(f.RDB, Options{Store: f.Store, Events: acts{f.sink}, Now: f.Clock.Now, Logger: zaptest.NewLogger(f.t)})
}

// signal records a signal of device at the given offset from T0.
func (f *fixture) signal(device, typ string, at time.Duration) {
	f.t.Helper()
	f.Signal(f.t, device, typ, at)
}

// deferTo defers every incident due now to until, as the alarm loop does for those a silence covers.
func (f *fixture) deferTo(until time.Time) {
	f.t.Helper()
	f.DeferAll(f.t, func(string) time.Time { return until })
}

// nextAct is when the alarm loop acts next on device's incident.
func (f *fixture) nextAct(device string) time.Time {
	f.t.Helper()
	d, found, err := f.Store.Device(context.Background(), device)
	require.NoError(f.t, err)
	require.True(f.t, found, device)
	return d.NextAct
}

func kinds(events []event.Event) []string {
	out := make([]string, 0, len(events))
	for _, e := range events {
		out = append(out, e.DeviceID+" "+string(e.Kind))
	}
	return out
}

// A silence ended early hands back, two index refreshes later, the incidents it deferred: a type
// silence its type's, a device silence its device. What another silence defers to the same instant
// stays deferred.
func TestEndingASilenceEarlyRearmsWhatItDeferred(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		sil := f.replica()
		ends := f.T0.Add(time.Hour)
		gateways, err := sil.Create(ctx, Silence{DeviceType: "gateway", Ends: ends})
		require.NoError(t, err)
		d1, err := sil.Create(ctx, Silence{DeviceID: "d1", Ends: ends})
		require.NoError(t, err)
		f.signal("g1", "gateway", 0)
		_, _, err = f.Store.Register(ctx, []string{"g2"}, []deadline.Registration{{Type: "gateway", TimeoutMs: 6000}}, []string{""})
		require.NoError(t, err)
		f.signal("g2", "gateway", 0)
		f.signal("d1", "", 0)
		f.Clock.Set(f.T0.Add(11 * time.Second))
		f.deferTo(ends)
		require.Equal(t, []string{"gateway silenced", "d1 silenced"}, kinds(f.sink.Take()))

		f.Clock.Set(f.T0.Add(20 * time.Second))
		ok, err := sil.End(ctx, gateways.ID, event.Act{By: "alice"})
		require.NoError(t, err)
		require.True(t, ok)
		got := f.sink.Take()
		require.Equal(t, []string{"gateway unsilenced"}, kinds(got))
		require.Equal(t, "alice", got[0].By)
		rearmed := f.T0.Add(22 * time.Second)
		require.Equal(t, rearmed, f.nextAct("g1"))
		require.Equal(t, rearmed, f.nextAct("g2"), "a gateway with its own timeout is a gateway")
		require.Equal(t, ends, f.nextAct("d1"), "silenced to the same instant by its own silence")

		ok, err = sil.End(ctx, d1.ID, event.Act{})
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, rearmed, f.nextAct("d1"))
	})
}

// A silence that ends at its time is announced once however many replicas tend it; a refused event is
// tried again, by any replica; an ended silence is purged only once its end was announced.
func TestSilenceEndIsAnnouncedOnceAcrossReplicas(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		a, b := f.replica(), f.replica()
		f.signal("d1", "gateway", 0)
		s, err := a.Create(ctx, Silence{DeviceID: "d1", Ends: f.T0.Add(time.Minute), Comment: "swap", By: "carol"})
		require.NoError(t, err)
		created := f.sink.Take()
		require.Len(t, created, 1)
		require.Equal(t, eventOf(event.Silenced, s, "gateway", event.Act{By: "carol", Note: "swap"}, f.T0), created[0])
		require.NoError(t, b.Load(ctx))

		f.Clock.Set(f.T0.Add(time.Minute))
		f.sink.SetDown(true)
		require.ErrorIs(t, a.tend(ctx), errNotAnnounced)
		require.NoError(t, b.Load(ctx))
		f.sink.SetDown(false)
		for range 3 {
			require.NoError(t, b.tend(ctx))
			require.NoError(t, a.tend(ctx))
		}
		got := f.sink.Take()
		require.Len(t, got, 1, "one unsilenced event: %v", got)
		require.Equal(t, EventID(s.ID, event.Unsilenced), got[0].ID)
		require.Equal(t, "gateway", got[0].DeviceType)

		f.Clock.Set(f.T0.Add(2*time.Minute + time.Second))
		require.NoError(t, a.tend(ctx))
		require.NoError(t, a.Load(ctx))
		list, err := a.read(ctx)
		require.NoError(t, err)
		require.Empty(t, list, "purged once announced and a minute past its end")
		ok, err := a.End(ctx, s.ID, event.Act{})
		require.NoError(t, err)
		require.False(t, ok)
		require.Empty(t, f.sink.Take())
	})
}

// A silence ended early is announced by End with the act; the tending loops do not announce it again,
// and an unannounced silence is kept past purgeAfter until giveUpAfter.
func TestSilenceEndedEarlyIsNotAnnouncedAgain(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		a := f.replica()
		s, err := a.Create(ctx, Silence{DeviceType: "sensor", Ends: f.T0.Add(time.Minute)})
		require.NoError(t, err)
		kept, err := a.Create(ctx, Silence{DeviceType: "gateway", Ends: f.T0.Add(time.Minute)})
		require.NoError(t, err)
		f.sink.Take()
		ok, err := a.End(ctx, s.ID, event.Act{By: "dave", Note: "done"})
		require.NoError(t, err)
		require.True(t, ok)
		got := f.sink.Take()
		require.Len(t, got, 1)
		require.Equal(t, eventOf(event.Unsilenced, s, "sensor", event.Act{By: "dave", Note: "done"}, f.T0), got[0])

		f.sink.SetDown(true) // the gateway silence's end cannot be announced
		f.Clock.Set(f.T0.Add(3 * time.Minute))
		require.ErrorIs(t, a.tend(ctx), errNotAnnounced)
		list, err := a.read(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1, "kept until announced")
		require.Equal(t, kept.ID, list[0].ID)
		f.Clock.Set(f.T0.Add(time.Minute + giveUpAfter + time.Second))
		_ = a.tend(ctx)
		list, err = a.read(ctx)
		require.NoError(t, err)
		require.Empty(t, list, "given up on after giveUpAfter")
	})
}

// TestSilencesOutliveRedisLosingThem: Redis comes back empty, as after a restart without persistence.
// A replica's next refresh writes the silences it knew back instead of forgetting them, whether or not
// its heartbeat noticed the loss first; a silence deleted on another replica is still forgotten.
func TestSilencesOutliveRedisLosingThem(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := t.Context()
		_, err := f.Store.SyncLayout(ctx, f.Store.Slots())
		require.NoError(t, err)
		sil, other := f.replica(), f.replica()
		kept, err := sil.Create(ctx, Silence{DeviceID: "d1", Ends: f.T0.Add(time.Hour)})
		require.NoError(t, err)
		deleted, err := sil.Create(ctx, Silence{DeviceType: "gateway", Ends: f.T0.Add(time.Hour)})
		require.NoError(t, err)
		require.NoError(t, sil.Load(ctx))
		ok, err := other.delete(ctx, deleted.ID)
		require.NoError(t, err)
		require.True(t, ok)
		stored := func() []string {
			require.NoError(t, sil.Load(ctx))
			all, err := other.List(ctx)
			require.NoError(t, err)
			var ids []string
			for _, s := range all {
				ids = append(ids, s.ID)
			}
			return ids
		}
		require.Equal(t, []string{kept.ID}, stored(), "a deletion is no loss")

		for _, noticed := range []bool{false, true} {
			testenv.LoseData(t, f.RDB)
			if noticed {
				_, err := f.Store.RefreshLayout(ctx)
				require.NoError(t, err)
			}
			require.Equal(t, []string{kept.ID}, stored(), "the heartbeat noticed the loss first: %v", noticed)
			require.Equal(t, kept.Ends, sil.SilencedUntil("d1", "default", f.Clock.Now()))
		}
	})
}

// TestSilencesOutliveTheirMasterLosingThem: on Redis Cluster the master of the silences comes back empty
// while the layout's master keeps its data (the prefix "test" puts the two on different masters of the
// test cluster); on a standalone Redis that is all of the data. The replica whose refresh finds the
// silences gone first writes them back, and both keep them in force.
func TestSilencesOutliveTheirMasterLosingThem(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := t.Context()
		replica := func() *Silences {
			store, err := deadline.New(f.RDB, deadline.Options{Slots: 8, KeyPrefix: "test", Now: f.Clock.Now,
				Timeout: func(string) time.Duration { return time.Minute }})
			require.NoError(t, err)
			_, err = store.SyncLayout(ctx, 8)
			require.NoError(t, err)
			return New(f.RDB, Options{Store: store, KeyPrefix: "test", Now: f.Clock.Now, Logger: zaptest.NewLogger(t)})
		}
		sil, other := replica(), replica()
		kept, err := sil.Create(ctx, Silence{DeviceID: "d1", Ends: f.T0.Add(time.Hour)})
		require.NoError(t, err)
		require.NoError(t, other.Load(ctx))

		testenv.LoseDataOf(t, f.RDB, silencesKey("test"), slotlayout.LayoutKey("test"))
		for _, s := range []*Silences{other, sil} {
			require.NoError(t, s.Load(ctx))
			require.Equal(t, kept.Ends, s.SilencedUntil("d1", "default", f.Clock.Now()))
		}
		all, err := sil.List(ctx)
		require.NoError(t, err)
		require.Len(t, all, 1)
		require.Equal(t, kept.ID, all[0].ID)
	})
}

func TestSilenceCreatedElsewhereAppliesAfterRefresh(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		here, other := f.replica(), f.replica()
		s, err := other.Create(ctx, Silence{DeviceID: "d1", Ends: f.T0.Add(time.Hour)})
		require.NoError(t, err)
		require.True(t, here.SilencedUntil("d1", "default", f.T0).IsZero(), "not read yet")
		require.NoError(t, here.Load(ctx))
		require.Equal(t, s.Ends, here.SilencedUntil("d1", "default", f.T0).UTC())
		ok, err := here.delete(ctx, s.ID)
		require.NoError(t, err)
		require.True(t, ok)
		require.True(t, here.SilencedUntil("d1", "default", f.T0).IsZero())
		ok, err = here.delete(ctx, s.ID)
		require.NoError(t, err)
		require.False(t, ok)
	})
}

func TestCreateRefusesInvalidSilences(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		sil := f.replica()
		_, err := sil.Create(ctx, Silence{Ends: f.T0.Add(time.Hour)})
		require.ErrorIs(t, err, ErrInvalid)
		_, err = sil.Create(ctx, Silence{DeviceID: "x", DeviceType: "gateway", Ends: f.T0.Add(time.Hour)})
		require.ErrorIs(t, err, ErrInvalid)
		_, err = sil.Create(ctx, Silence{DeviceID: "x", Ends: f.T0.Add(-time.Second)})
		require.ErrorIs(t, err, ErrInvalid)
		require.Empty(t, f.sink.Take())
	})
}

func TestSilenceJSONRoundTrip(t *testing.T) {
	s := Silence{ID: "x", DeviceType: "gateway", Starts: time.Unix(1, 0).UTC(), Ends: time.Unix(2, 0).UTC()}
	b, err := json.Marshal(s)
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"x","device_type":"gateway","starts":"1970-01-01T00:00:01Z","ends":"1970-01-01T00:00:02Z"}`, string(b))
}

// The silences' keys are the strings older replicas wrote (docs/concepts.md), so their silences stay
// readable across an upgrade.
func TestKeysKeepTheirStrings(t *testing.T) {
	require.Equal(t, "hb:silences", silencesKey(""))
	require.Equal(t, "test:silences", silencesKey("test"))
	require.Equal(t, "hb:silences:ended:abc", endedKey(silencesKey(""), "abc"))
}

func TestIDOfEventInvertsEventID(t *testing.T) {
	for _, kind := range []event.Kind{event.Silenced, event.Unsilenced} {
		id, ok := IDOfEvent(EventID("6ebb8040fb252584", kind))
		require.True(t, ok)
		require.Equal(t, "6ebb8040fb252584", id)
	}
	for _, other := range []string{"d1/1795340000000/interrupted/0", "silence/x/acked", "silence//silenced", "silence/x"} {
		_, ok := IDOfEvent(other)
		require.False(t, ok, other)
	}
}

// TestOneTokenHasItsShareOfSilences: a named token may keep Options.PerToken silences stored; the next is
// refused naming its share while another token still creates, and a deleted one makes room again. One
// operate token can no longer fill the store and lock every other operator out.
func TestOneTokenHasItsShareOfSilences(t *testing.T) {
	eachFixture(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := New(f.RDB, Options{Store: f.Store, PerToken: 2, Now: f.Clock.Now, Logger: zaptest.NewLogger(t)})
		create := func(token, device string) (Silence, error) {
			return s.Create(ctx, Silence{DeviceID: device, Token: token, By: token, Ends: f.Clock.Now().Add(time.Hour)})
		}
		first, err := create("noisy", "d-1")
		require.NoError(t, err)
		_, err = create("noisy", "d-2")
		require.NoError(t, err)
		_, err = create("noisy", "d-3")
		require.ErrorIs(t, err, ErrTooMany)
		require.ErrorContains(t, err, `token "noisy" has 2 stored, its share`)
		_, err = create("other", "d-3")
		require.NoError(t, err, "another token is not locked out")
		ended, err := s.End(ctx, first.ID, event.Act{By: "noisy", Token: "noisy"})
		require.NoError(t, err)
		require.True(t, ended)
		_, err = create("noisy", "d-3")
		require.NoError(t, err, "room again after a delete")
	})
}
