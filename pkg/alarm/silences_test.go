package alarm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// withActs gives the fixture's handler a silence store that publishes its acts through the recorder
// and re-arms what it deferred, as the daemon wires it.
func (f *fixture) withActs() *Silences {
	f.t.Helper()
	f.silences = f.replica()
	f.handler = f.newHandler()
	return f.silences
}

// replica is another silence store on the fixture's Redis, as on another heartbeatd replica.
func (f *fixture) replica() *Silences {
	acts := NewActs(ActsOptions{Sink: f.sink, Logger: zaptest.NewLogger(f.t)})
	return NewSilences(f.rdb, f.store.Keys(), SilencesOptions{Store: f.store, Acts: acts, Now: f.clock.Now, Logger: zaptest.NewLogger(f.t)})
}

// A silence ended early re-arms exactly the incidents it deferred: a type silence its type's
// (deadline.Store.RearmType), a device silence its device, each two index refreshes after the end.
// Incidents another silence defers to the very same instant stay deferred.
func TestEndingASilenceEarlyRearmsWhatItDeferred(t *testing.T) {
	eachBackend(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		sil := f.withActs()
		ends := f.t0.Add(time.Hour)
		gateways, err := sil.Create(ctx, Silence{DeviceType: "gateway", Ends: ends})
		require.NoError(t, err)
		_, err = sil.Create(ctx, Silence{DeviceID: "d1", Ends: ends}) // the same end, another type
		require.NoError(t, err)
		d2, err := sil.Create(ctx, Silence{DeviceID: "d2", Ends: f.t0.Add(2 * time.Hour)})
		require.NoError(t, err)
		const n = 60
		var want []string
		for i := range n {
			id := fmt.Sprintf("g-%04d", i)
			f.signal(id, "gateway", 0)
			want = append(want, id+" interrupted 0")
		}
		f.signal("d1", "", 0)
		f.signal("d2", "", 0)
		f.sink.take() // the silenced events
		require.Empty(t, f.at(11*time.Second), "every device is silenced")

		f.clock.Set(f.t0.Add(20 * time.Second))
		ok, err := sil.End(ctx, gateways.ID, Act{By: "alice"})
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, []string{"gateway unsilenced 0"}, ids(f.sink.take()))
		require.Empty(t, f.at(21*time.Second), "re-armed two refreshes after the end, when every replica dropped the silence")
		require.Equal(t, want, f.at(22*time.Second), "every gateway alarms; d1, silenced to the same instant, does not")

		ok, err = sil.End(ctx, d2.ID, Act{})
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, []string{"d2 unsilenced 0"}, ids(f.sink.take()))
		require.Equal(t, []string{"d2 interrupted 0"}, f.at(24*time.Second))
		require.Contains(t, f.at(time.Hour), "d1 interrupted 0", "d1 at its own silence's end")
	})
}

// A silence that ends at its time is announced once however many replicas tend it; a refused event is
// tried again, by any replica; an ended silence is purged only once its end was announced.
func TestSilenceEndIsAnnouncedOnceAcrossReplicas(t *testing.T) {
	eachBackend(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		a, b := f.withActs(), f.replica()
		f.signal("d1", "gateway", 0)
		s, err := a.Create(ctx, Silence{DeviceID: "d1", Ends: f.t0.Add(time.Minute), Comment: "swap", By: "carol"})
		require.NoError(t, err)
		created := f.sink.take()
		require.Len(t, created, 1)
		require.Equal(t, SilenceEvent(event.Silenced, s, "gateway", Act{By: "carol", Note: "swap"}, f.t0), created[0])
		require.NoError(t, b.Load(ctx))

		f.clock.Set(f.t0.Add(time.Minute))
		f.sink.down.Store(true)
		require.ErrorIs(t, a.tend(ctx), errNotAnnounced)
		require.NoError(t, b.Load(ctx))
		f.sink.down.Store(false)
		for range 3 {
			require.NoError(t, b.tend(ctx))
			require.NoError(t, a.tend(ctx))
		}
		got := f.sink.take()
		require.Len(t, got, 1, "one unsilenced event: %v", got)
		require.Equal(t, SilenceEventID(s.ID, event.Unsilenced), got[0].ID)
		require.Equal(t, "gateway", got[0].DeviceType)

		f.clock.Set(f.t0.Add(2*time.Minute + time.Second))
		require.NoError(t, a.tend(ctx))
		require.NoError(t, a.Load(ctx))
		list, err := a.read(ctx)
		require.NoError(t, err)
		require.Empty(t, list, "purged once announced and a minute past its end")
		ok, err := a.End(ctx, s.ID, Act{})
		require.NoError(t, err)
		require.False(t, ok)
		require.Empty(t, f.sink.take())
	})
}

// A silence ended early is announced by End with the act; the tending loops do not announce it again,
// and an unannounced silence is kept past purgeAfter until giveUpAfter.
func TestSilenceEndedEarlyIsNotAnnouncedAgain(t *testing.T) {
	eachBackend(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		a := f.withActs()
		s, err := a.Create(ctx, Silence{DeviceType: "sensor", Ends: f.t0.Add(time.Minute)})
		require.NoError(t, err)
		kept, err := a.Create(ctx, Silence{DeviceType: "gateway", Ends: f.t0.Add(time.Minute)})
		require.NoError(t, err)
		f.sink.take()
		ok, err := a.End(ctx, s.ID, Act{By: "dave", Note: "done"})
		require.NoError(t, err)
		require.True(t, ok)
		got := f.sink.take()
		require.Len(t, got, 1)
		require.Equal(t, SilenceEvent(event.Unsilenced, s, "sensor", Act{By: "dave", Note: "done"}, f.t0), got[0])

		f.sink.down.Store(true) // the gateway silence's end cannot be announced
		f.clock.Set(f.t0.Add(3 * time.Minute))
		require.ErrorIs(t, a.tend(ctx), errNotAnnounced)
		list, err := a.read(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1, "kept until announced")
		require.Equal(t, kept.ID, list[0].ID)
		f.clock.Set(f.t0.Add(time.Minute + giveUpAfter + time.Second))
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
	eachBackend(t, func(t *testing.T, f *fixture) {
		ctx := t.Context()
		_, err := f.store.SyncLayout(ctx, f.store.Slots())
		require.NoError(t, err)
		sil, other := f.replica(), f.replica()
		kept, err := sil.Create(ctx, Silence{DeviceID: "d1", Ends: f.t0.Add(time.Hour)})
		require.NoError(t, err)
		deleted, err := sil.Create(ctx, Silence{DeviceType: "gateway", Ends: f.t0.Add(time.Hour)})
		require.NoError(t, err)
		require.NoError(t, sil.Load(ctx))
		ok, err := other.Delete(ctx, deleted.ID)
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
			testenv.LoseData(t, f.rdb)
			if noticed {
				_, err := f.store.RefreshLayout(ctx)
				require.NoError(t, err)
			}
			require.Equal(t, []string{kept.ID}, stored(), "the heartbeat noticed the loss first: %v", noticed)
			require.Equal(t, kept.Ends, sil.SilencedUntil("d1", "default", f.clock.Now()))
		}
	})
}

// TestSilencesOutliveTheirMasterLosingThem: on Redis Cluster the master of the silences comes back empty
// while the layout's master keeps its data (the prefix "test" puts the two on different masters of the
// test cluster); on a standalone Redis that is all of the data. The replica whose refresh finds the
// silences gone first writes them back, and both keep them in force.
func TestSilencesOutliveTheirMasterLosingThem(t *testing.T) {
	eachBackend(t, func(t *testing.T, f *fixture) {
		ctx := t.Context()
		replica := func() *Silences {
			store, err := deadline.New(f.rdb, deadline.Options{Slots: 8, KeyPrefix: "test", Now: f.clock.Now,
				Timeout: func(string) time.Duration { return time.Minute }})
			require.NoError(t, err)
			_, err = store.SyncLayout(ctx, 8)
			require.NoError(t, err)
			return NewSilences(f.rdb, store.Keys(), SilencesOptions{Store: store, Now: f.clock.Now, Logger: zaptest.NewLogger(t)})
		}
		sil, other := replica(), replica()
		kept, err := sil.Create(ctx, Silence{DeviceID: "d1", Ends: f.t0.Add(time.Hour)})
		require.NoError(t, err)
		require.NoError(t, other.Load(ctx))

		keys := deadline.NewKeyspace("test")
		testenv.LoseDataOf(t, f.rdb, keys.Silences(), keys.Layout())
		for _, s := range []*Silences{other, sil} {
			require.NoError(t, s.Load(ctx))
			require.Equal(t, kept.Ends, s.SilencedUntil("d1", "default", f.clock.Now()))
		}
		all, err := sil.List(ctx)
		require.NoError(t, err)
		require.Len(t, all, 1)
		require.Equal(t, kept.ID, all[0].ID)
	})
}
