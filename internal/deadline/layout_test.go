package deadline_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/slotlayout"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

func TestSyncLayoutInitialisesDoublesAndRefusesHalving(t *testing.T) {
	eachFixture(t, 16, func(t *testing.T, f fixture) {
		ctx := context.Background()
		l, err := f.Store.SyncLayout(ctx, 16)
		require.NoError(t, err)
		require.Equal(t, deadline.Layout{Slots: 16, Epoch: l.Epoch}, l)
		require.NotEmpty(t, l.Epoch)
		_, err = f.Store.SyncLayout(ctx, 8)
		require.ErrorIs(t, err, deadline.ErrHalving)
		_, err = f.Store.SyncLayout(ctx, 64)
		require.ErrorIs(t, err, deadline.ErrStepTooLarge)
		require.ErrorContains(t, err, "double one step at a time (32)")
		l, err = f.Store.SyncLayout(ctx, 32)
		require.NoError(t, err)
		require.Equal(t, 32, l.Slots)
		require.Equal(t, 16, l.Previous)
		_, err = f.Store.DoubleSlots(ctx)
		require.ErrorContains(t, err, "still settling")
	})
}

// TestDoublingUnderFlowingSignals doubles 16 → 32 slots while devices signal and fall silent, with a
// second replica that keeps writing with the old count for a while: every silent device is claimed exactly
// once, no signalling device ever is, and after retirement an old-slot incident still recovers.
func TestDoublingUnderFlowingSignals(t *testing.T) {
	eachFixture(t, 16, func(t *testing.T, f fixture) {
		ctx := context.Background()
		_, err := f.Store.SyncLayout(ctx, 16)
		require.NoError(t, err)
		lagging, err := deadline.New(f.RDB, deadline.Options{Slots: 16, Now: f.Clock.Now, Timeout: timeoutOf})
		require.NoError(t, err)
		_, err = lagging.SyncLayout(ctx, 16)
		require.NoError(t, err)

		const n = 2000
		silentFrom := map[string]int{} // device → step from which it stays silent
		for i := range n {
			if i%5 == 0 {
				silentFrom[fmt.Sprint("dev-", i)] = 1 + i%40 // some fall silent before, some after the doubling
			}
		}
		claimed := map[string]int{}
		drain := func(step int) {
			for {
				res := f.ClaimAll(t, deadline.ClaimOptions{Lease: time.Hour})
				var acks []deadline.Ack
				for _, c := range res.Claims {
					if !c.Fresh {
						continue
					}
					from, silent := silentFrom[c.Device]
					require.True(t, silent && step >= from, "step %d: %s claimed but it signals", step, c.Device)
					claimed[c.Device]++
					st := c.State
					st.Next = 1
					acks = append(acks, deadline.Ack{Device: c.Device, Slot: c.Slot, Op: deadline.Reschedule, Claimed: c.State.Deadline, Dormant: true, State: st})
				}
				f.ack(t, acks...)
				if !res.More {
					return
				}
			}
		}
		for step := range 120 {
			writer := f.Store
			if step%2 == 1 && step >= 20 && step < 26 {
				writer = lagging // has not seen the doubling yet
			}
			var sigs []deadline.Signal
			for i := range n {
				dev := fmt.Sprint("dev-", i)
				if from, silent := silentFrom[dev]; silent && step >= from {
					continue
				}
				typ := "gateway"
				if i%2 == 0 {
					typ = "" // untyped signals keep the recorded type across the move
				}
				if step == 0 {
					typ = "gateway"
				}
				sigs = append(sigs, deadline.Signal{Device: dev, Type: typ, Seen: f.Clock.Now()})
			}
			require.NoError(t, writer.Refresh(ctx, sigs))
			if step == 20 {
				_, err := f.Store.DoubleSlots(ctx)
				require.NoError(t, err)
			}
			if step == 26 {
				_, err := lagging.RefreshLayout(ctx)
				require.NoError(t, err)
			}
			drain(step)
			f.Clock.Advance(time.Second)
		}
		require.Len(t, claimed, len(silentFrom), "every silent device claimed")
		for dev, k := range claimed {
			require.Equal(t, 1, k, "%s claimed %d times", dev, k)
		}

		// Retire: the incidents left in old slots move to their new slot and still recover.
		retired, err := f.Store.RetireLayout(ctx, 90*time.Second)
		require.NoError(t, err)
		require.True(t, retired)
		require.False(t, f.Store.Layout().Moving())
		var movedDev string
		for dev := range claimed {
			if deadline.Slot(dev, 16) != deadline.Slot(dev, 32) && silentFrom[dev] < 20 {
				movedDev = dev
				break
			}
		}
		require.NotEmpty(t, movedDev)
		d, found := f.device(t, movedDev)
		require.True(t, found)
		require.NotNil(t, d.Incident)
		f.Refresh(t, deadline.Signal{Device: movedDev, Seen: f.Clock.Now()})
		res := f.ClaimAll(t, deadline.ClaimOptions{Lease: time.Hour})
		require.Len(t, res.Claims, 1, "the recovery probe found the migrated incident")
		cur, err := f.Store.CurrentDeadlines(ctx, res.Claims)
		require.NoError(t, err)
		require.Greater(t, cur[0].UnixMilli(), res.Claims[0].State.Deadline)
	})
}

// TestReplayAfterDoublingDoesNotReopenIncident: a signal older than an open incident, replayed after a
// doubling moved its device to a new slot, opens no second incident there (the incident's state lives in
// the old slot): the outage is reported once, under one id.
func TestReplayAfterDoublingDoesNotReopenIncident(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		_, err := f.Store.SyncLayout(ctx, 8)
		require.NoError(t, err)
		dev := ""
		for i := 0; dev == ""; i++ {
			if d := fmt.Sprint("moved-", i); deadline.Slot(d, 8) != deadline.Slot(d, 16) {
				dev = d
			}
		}
		t0 := f.Clock.Now()
		c := claimOne(t, f, dev)
		require.True(t, c.Fresh)
		_, err = f.Store.DoubleSlots(ctx)
		require.NoError(t, err)

		f.Refresh(t, deadline.Signal{Device: dev, Type: "gateway", Seen: t0.Add(-time.Second)})
		f.Clock.Advance(time.Minute)
		res := f.ClaimAll(t, deadline.ClaimOptions{})
		for _, cl := range res.Claims {
			require.False(t, cl.Fresh, "a replay older than the open incident opened a new one: deadline %d", cl.State.Deadline)
		}
	})
}

// TestStoresNoticeRedisLostTheirData: Redis comes back empty, as after a restart without persistence.
// Every store notices at its next layout read, not only the one that writes the layout anew; the type
// names go back under the indexes the scores use, a name registered afterwards takes a free index, and a
// parent link the store remembers is written again by the child's next signal.
func TestStoresNoticeRedisLostTheirData(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := t.Context()
		other := f.replicas(t, 8, 2)[1]
		registry := func() map[string]string {
			all, err := f.RDB.HGetAll(ctx, f.Store.Keys().Types()).Result()
			require.NoError(t, err)
			return all
		}
		types := registry()
		child := deadline.Signal{Device: "child", Type: "sensor", Parent: "gw", Seen: f.Clock.Now()}
		f.Refresh(t, child)
		_, err := f.Store.RefreshLayout(ctx)
		require.NoError(t, err)
		lost, _ := f.Store.DataLost()
		require.Zero(t, lost, "a layout read of the same data is no loss")

		testenv.LoseData(t, f.RDB)
		// A write-back of the registry that fails is owed until a layout read succeeds in it.
		require.NoError(t, f.RDB.Set(ctx, f.Store.Keys().Types(), "not a hash", 0).Err())
		_, err = f.Store.RefreshLayout(ctx)
		require.ErrorContains(t, err, "WRONGTYPE")
		require.NoError(t, f.RDB.Del(ctx, f.Store.Keys().Types()).Err())
		_, err = f.Store.RefreshLayout(ctx)
		require.NoError(t, err)
		require.Equal(t, types, registry(), "written back by the store that owed it")
		for _, s := range []*deadline.Store{f.Store, other} {
			_, err := s.RefreshLayout(ctx)
			require.NoError(t, err)
			lost, at := s.DataLost()
			require.Equal(t, int64(1), lost)
			require.True(t, at.Equal(f.Clock.Now()), "noticed at %s", at)
		}
		require.Equal(t, types, registry())
		require.NoError(t, other.Load(ctx, "default", "gateway", "sensor", "meter"))
		meter, err := other.TypeIndex(ctx, "meter")
		require.NoError(t, err)
		require.Equal(t, len(types), meter)

		child.Seen = f.Clock.Now().Add(1)
		f.Refresh(t, child)
		parents, err := f.Store.Links().ParentsOf(ctx, []string{"child"})
		require.NoError(t, err)
		require.Equal(t, []string{"gw"}, parents)
	})
}

// TestStoresNoticeOneMasterLosingItsData: on Redis Cluster the master of the type registry comes back
// empty while the layout's master keeps its data (on a standalone Redis that is all of it). Every store
// counts the loss once, however often it reads the layout; the registry comes back; a store started
// afterwards counts nothing; the children's next signals write again the parent links that were lost.
func TestStoresNoticeOneMasterLosingItsData(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := t.Context()
		keys := f.Store.Keys()
		stores := f.replicas(t, 8, 2)
		var children []deadline.Signal
		var ids []string
		for i := range 20 {
			ids = append(ids, fmt.Sprintf("child-%d", i))
			children = append(children, deadline.Signal{Device: ids[i], Type: "sensor", Parent: "gw", Seen: f.Clock.Now()})
		}
		f.Refresh(t, children...)
		types, err := f.RDB.HGetAll(ctx, keys.Types()).Result()
		require.NoError(t, err)

		testenv.LoseDataOf(t, f.RDB, keys.Types(), slotlayout.LayoutKey(""))
		for read := range 3 {
			for i, s := range stores {
				_, err := s.RefreshLayout(ctx)
				require.NoError(t, err)
				lost, _ := s.DataLost()
				require.Equal(t, int64(1), lost, "store %d, read %d", i, read)
			}
		}
		after, err := f.RDB.HGetAll(ctx, keys.Types()).Result()
		require.NoError(t, err)
		require.Equal(t, types, after)
		later := fixtureStore(t, f.RDB, 8, f.Clock.Now, nil)
		_, err = later.SyncLayout(ctx, 8)
		require.NoError(t, err)
		lost, _ := later.DataLost()
		require.Zero(t, lost, "a store that never saw the data has lost none")

		parents, err := f.Store.Links().ParentsOf(ctx, ids)
		require.NoError(t, err)
		require.Contains(t, parents, "", "some links were on the master that lost its data")
		for i := range children {
			children[i].Seen = f.Clock.Now().Add(1)
		}
		f.Refresh(t, children...)
		parents, err = f.Store.Links().ParentsOf(ctx, ids)
		require.NoError(t, err)
		require.Equal(t, slices.Repeat([]string{"gw"}, len(ids)), parents)
	})
}

// TestOwnTimeoutsOutliveRedisLosingThem: after a loss, a replica whose table sync comes before its layout
// read writes back the per-device timeouts it applies (the table's version went back), and so does one
// that noticed the loss first; a replica started afterwards applies them too.
func TestOwnTimeoutsOutliveRedisLosingThem(t *testing.T) {
	eachFixture(t, 4, func(t *testing.T, f fixture) {
		ctx := t.Context()
		other := f.replicas(t, 4, 2)[1]
		_, _, err := f.Store.Register(ctx, []string{"own"}, []deadline.Registration{{Type: "gateway", TimeoutMs: 90_000}}, []string{""})
		require.NoError(t, err)
		require.NoError(t, other.SyncOverrides(ctx))
		appliedBy := func(s *deadline.Store) {
			t.Helper()
			seen := f.Clock.Now()
			require.NoError(t, s.Refresh(ctx, []deadline.Signal{{Device: "own", Type: "gateway", Seen: seen}}))
			d, _ := f.device(t, "own")
			require.Equal(t, []any{"gateway", 90 * time.Second}, []any{d.Type, d.OwnTimeout})
			require.Equal(t, seen.Add(90*time.Second), d.Deadline, "its own timeout, not the type's 30s")
			f.Clock.Advance(time.Millisecond)
		}
		appliedBy(other)

		testenv.LoseData(t, f.RDB)
		require.NoError(t, other.SyncOverrides(ctx), "before any layout read")
		lost, _ := other.DataLost()
		require.Equal(t, int64(1), lost, "the version going back was checked")
		appliedBy(other)
		_, err = f.Store.RefreshLayout(ctx)
		require.NoError(t, err)
		require.NoError(t, f.Store.SyncOverrides(ctx))
		appliedBy(f.Store)

		later := fixtureStore(t, f.RDB, 4, f.Clock.Now, nil)
		_, err = later.SyncLayout(ctx, 4)
		require.NoError(t, err)
		require.NoError(t, later.SyncOverrides(ctx))
		appliedBy(later)
		require.NoError(t, other.SyncOverrides(ctx))
		appliedBy(other)
	})
}
