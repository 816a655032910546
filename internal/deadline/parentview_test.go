package deadline_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

// downGateway makes gateway gw and its child silent, claims both 31 s later and leaves them as the alarm
// loop would: gw interrupted (down), the child waiting a minute for its verdict.
func downGateway(t *testing.T, f fixture, gw, child string) {
	t.Helper()
	now := f.Clock.Now()
	f.Refresh(t, deadline.Signal{Device: gw, Type: "gateway", Seen: now},
		deadline.Signal{Device: child, Type: "gateway", Parent: gw, Seen: now})
	f.Clock.Advance(31 * time.Second)
	res := f.ClaimAll(t, deadline.ClaimOptions{})
	require.ElementsMatch(t, []string{gw, child}, devices(res.Claims))
	for _, c := range res.Claims {
		if c.Device == gw {
			f.ack(t, reschedule(c, sentOnce(c), f.Clock.Now().Add(time.Minute)))
		} else {
			f.ack(t, reschedule(c, c.State, f.Clock.Now().Add(time.Minute)))
		}
	}
	f.settle(t, res.Claims...)
}

// TestParentVerdictWakesItsChildren: a parent's verdict makes its waiting children due at once; a device
// that is nobody's parent wakes nothing.
func TestParentVerdictWakesItsChildren(t *testing.T) {
	eachFixture(t, 64, func(t *testing.T, f fixture) {
		ctx := context.Background()
		downGateway(t, f, "gw-1", "child-1")
		n, err := f.Store.WakeChildren(ctx, []deadline.Verdict{{Device: "child-1", Down: true}}, f.Clock.Now(), nil)
		require.NoError(t, err)
		require.Zero(t, n, "child-1 has no children")
		require.Empty(t, f.ClaimAll(t, deadline.ClaimOptions{}).Claims)

		n, err = f.Store.WakeChildren(ctx, []deadline.Verdict{{Device: "gw-1", Down: true}}, f.Clock.Now(), nil)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		require.Equal(t, []string{"child-1"}, devices(f.ClaimAll(t, deadline.ClaimOptions{}).Claims), "woken at once")
	})
}

// TestChildrenOfParentsLinkedByOlderVersionWake: links written before the named-parents sets existed
// wake their children too, on every replica, also one that checked the fleet's mark before.
func TestChildrenOfParentsLinkedByOlderVersionWake(t *testing.T) {
	eachFixture(t, 64, func(t *testing.T, f fixture) {
		ctx := context.Background()
		downGateway(t, f, "gw-2", "child-2")
		_, err := f.Store.WakeChildren(ctx, []deadline.Verdict{{Device: "child-2", Down: true}}, f.Clock.Now(), nil) // checks the mark
		require.NoError(t, err)
		require.NoError(t, f.Store.AsLinkedByOlderVersion(ctx, "gw-2"))
		for _, s := range f.replicas(t, 64, 2) {
			f.Clock.Advance(3 * time.Second)
			n, err := s.WakeChildren(ctx, []deadline.Verdict{{Device: "gw-2", Down: true}}, f.Clock.Now(), nil)
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "the children of a parent linked by an older version are woken too")
			res := f.ClaimAll(t, deadline.ClaimOptions{})
			require.Equal(t, []string{"child-2"}, devices(res.Claims))
			f.ack(t, reschedule(res.Claims[0], res.Claims[0].State, f.Clock.Now().Add(time.Minute))) // waits again
		}
	})
}

// TestChildrenWakeAfterRedisLostData: a replica that finds Redis lost data no longer trusts the
// named-parents sets, and neither do the others: a parent whose entry was lost still wakes its children.
func TestChildrenWakeAfterRedisLostData(t *testing.T) {
	eachFixture(t, 64, func(t *testing.T, f fixture) {
		ctx := context.Background()
		downGateway(t, f, "gw-3", "child-3")
		other := f.replicas(t, 64, 2)[1]
		_, err := other.WakeChildren(ctx, []deadline.Verdict{{Device: "child-3", Down: true}}, f.Clock.Now(), nil) // checks the mark
		require.NoError(t, err)
		require.NoError(t, f.Store.AsLinkedByOlderVersion(ctx, "gw-3"))
		require.NoError(t, f.Store.SetNamed(ctx)) // the mark survived, the set did not
		f.Store.LoseData()
		_, err = f.Store.WakeChildren(ctx, []deadline.Verdict{{Device: "child-3", Down: true}}, f.Clock.Now(), nil)
		require.NoError(t, err)
		f.Clock.Advance(3 * time.Second)
		n, err := other.WakeChildren(ctx, []deadline.Verdict{{Device: "gw-3", Down: true}}, f.Clock.Now(), nil)
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "woken by the replica that did not see the loss")
	})
}

// TestNamedParentsRepairedAfterRedisLostData: after a data loss the fleet's mark says the named-parents
// sets may be incomplete, so every storm wakes every device's children. A sweeper pass names every
// linked parent again and marks the sets complete: the fleet no longer pays that for good, and the
// parent whose entry was lost still wakes its children.
func TestNamedParentsRepairedAfterRedisLostData(t *testing.T) {
	eachFixture(t, 64, func(t *testing.T, f fixture) {
		ctx := context.Background()
		downGateway(t, f, "gw-4", "child-4")
		require.NoError(t, f.Store.AsLinkedByOlderVersion(ctx, "gw-4"))
		require.NoError(t, f.Store.SetNamed(ctx)) // the mark survived, the set did not
		f.Store.LoseData()
		_, err := f.Store.WakeChildren(ctx, []deadline.Verdict{{Device: "child-4", Down: true}}, f.Clock.Now(), nil) // sets the mark back
		require.NoError(t, err)
		require.Equal(t, "1", f.Store.ParentsMark(ctx))

		repaired, err := f.Store.Links().RepairNamedParents(ctx)
		require.NoError(t, err)
		require.True(t, repaired)
		require.Equal(t, "named", f.Store.ParentsMark(ctx), "the sets are complete again")
		named, err := f.RDB.SIsMember(ctx, f.Store.Keys().NamedParents("gw-4"), "gw-4").Result()
		require.NoError(t, err)
		require.True(t, named, "the linked parent is named again")

		f.Clock.Advance(3 * time.Second)
		other := f.replicas(t, 64, 2)[1]
		n, err := other.WakeChildren(ctx, []deadline.Verdict{{Device: "gw-4", Down: true}}, f.Clock.Now(), nil)
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "its children are woken through the named parents")

		repaired, err = f.Store.Links().RepairNamedParents(ctx)
		require.NoError(t, err)
		require.False(t, repaired, "nothing to do once the mark says named")
	})
}

// TestDownParentReadOncePerVerdict: the view of a down parent is read from Redis once, not by every batch
// of its children, and read again as soon as any replica reports a parent's verdict, or after
// parentViewTTL (2 s).
func TestDownParentReadOncePerVerdict(t *testing.T) {
	eachFixture(t, 64, func(t *testing.T, f fixture) {
		ctx := context.Background()
		reads := &atomic.Int64{}
		f.Store = fixtureStore(t, counting(t, f.RDB, "zscore", reads), 64, f.Clock.Now, nil)
		other := fixtureStore(t, f.RDB, 64, f.Clock.Now, nil) // another replica
		downGateway(t, f, "gw-1", "child-1")

		view := func() deadline.Parent {
			t.Helper()
			views, err := f.Store.Parents(ctx, []string{"gw-1"})
			require.NoError(t, err)
			return views["gw-1"]
		}
		require.True(t, view().Down)
		require.EqualValues(t, 1, reads.Load())
		for range 3 {
			require.True(t, view().Down)
		}
		require.EqualValues(t, 1, reads.Load(), "read once while no verdict changed")
		f.Clock.Advance(2 * time.Second)
		require.True(t, view().Down)
		require.EqualValues(t, 2, reads.Load(), "read again after 2 s")

		// gw-1 is back: another replica reports it and wakes its children.
		f.Refresh(t, deadline.Signal{Device: "gw-1", Type: "gateway", Seen: f.Clock.Now()})
		_, err := other.WakeChildren(ctx, []deadline.Verdict{{Device: "gw-1", Down: true}}, f.Clock.Now(), nil)
		require.NoError(t, err)
		require.False(t, view().Down, "the woken children see the parent's new verdict")
		require.EqualValues(t, 3, reads.Load())
		require.False(t, view().Down)
		require.EqualValues(t, 4, reads.Load(), "a parent not down is read every time")
	})
}

// counting is a client of rdb's server that counts the commands named name it sends into n.
func counting(t *testing.T, rdb redis.UniversalClient, name string, n *atomic.Int64) redis.UniversalClient {
	t.Helper()
	var c redis.UniversalClient
	switch r := rdb.(type) {
	case *redis.Client:
		c = redis.NewClient(r.Options())
	case *redis.ClusterClient:
		c = redis.NewClusterClient(r.Options())
	default:
		t.Fatalf("unknown client %T", rdb)
	}
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(countHook{name: name, n: n})
	return c
}

type countHook struct {
	name string
	n    *atomic.Int64
}

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}

func (h countHook) count(cmd redis.Cmder) {
	if cmd.Name() == h.name {
		h.n.Add(1)
	}
}

// TestDownParentsWakeCommitsItsWaitingChildren: the wake of a down parent stores `suppressed` as sent for
// a child still waiting for it and hands the claim over, without a claim of the scanner; a child that
// signalled since is only made due, for its owner's claim to see it back. A process that dies before
// releasing the wake's record leaves the suppression to be handed out again once the lease runs out.
func TestDownParentsWakeCommitsItsWaitingChildren(t *testing.T) {
	eachFixture(t, 64, func(t *testing.T, f fixture) {
		ctx := context.Background()
		downGateway(t, f, "gw-4", "child-4")
		downGateway(t, f, "gw-5", "child-5")
		f.Refresh(t, deadline.Signal{Device: "child-5", Type: "gateway", Parent: "gw-5", Seen: f.Clock.Now()})

		var handed []deadline.Claim
		commit := &deadline.WakeCommit{Lease: 30 * time.Second, Handle: func(_ context.Context, c []deadline.Claim) error {
			handed = append(handed, c...)
			return nil
		}}
		verdicts := []deadline.Verdict{{Device: "gw-4", Down: true}, {Device: "gw-5", Down: true}}
		n, err := f.Store.WakeChildren(ctx, verdicts, f.Clock.Now(), commit)
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "child-4 committed; child-5's signal made its entry due already")
		require.Len(t, handed, 1)
		c := handed[0]
		require.Equal(t, "child-4", c.Device)
		require.True(t, c.CommittedSuppression)
		require.Equal(t, "gw-4", c.WokenBy)
		require.NotEmpty(t, c.Record)
		require.Zero(t, c.State.Next, "handed out as nothing sent, as a committed claim")
		d, _, err := f.Store.Device(ctx, "child-4")
		require.NoError(t, err)
		require.Equal(t, deadline.HoldParent, d.Incident.Hold, "stored as suppressed")

		require.Equal(t, []string{"child-5"}, devices(f.ClaimAll(t, deadline.ClaimOptions{}).Claims),
			"the child back online is due for its owner; the committed one is not")

		f.Clock.Advance(31 * time.Second) // the record was never released: its lease ran out
		var again *deadline.Claim
		for _, c := range f.ClaimAll(t, deadline.ClaimOptions{}).Claims {
			if c.Device == "child-4" {
				again = &c
			}
		}
		require.NotNil(t, again, "handed out again")
		require.True(t, again.CommittedSuppression, "as the suppression it committed")
	})
}
