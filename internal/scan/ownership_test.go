package scan_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/scan"
)

func TestAssignBalancesAndMovesLittle(t *testing.T) {
	const slots = 1024
	replicas := []string{"r1", "r2", "r3", "r4"}
	owner := map[int]string{}
	counts := map[string]int{}
	for _, r := range replicas {
		for _, s := range scan.Assign(r, replicas, slots) {
			require.Empty(t, owner[s], "slot %d assigned twice", s)
			owner[s] = r
			counts[r]++
		}
	}
	require.Len(t, owner, slots, "every slot has an owner")
	for r, n := range counts {
		require.InDelta(t, slots/len(replicas), n, float64(slots/len(replicas)/4), "replica %s holds %d slots", r, n)
	}

	joined := append(slices.Clone(replicas), "r5")
	moved := 0
	for s := range slots {
		if now := scan.Owner(s, joined); now != owner[s] {
			require.Equal(t, "r5", now, "a join only moves slots to the newcomer")
			moved++
		}
	}
	require.InDelta(t, slots/5, moved, float64(slots/5/3))

	left := []string{"r1", "r2", "r4"}
	for s := range slots {
		if owner[s] != "r3" {
			require.Equal(t, owner[s], scan.Owner(s, left), "a leave only moves the leaver's slots")
		}
	}
}

func TestOwnershipSharesTakesOverAndReleases(t *testing.T) {
	eachFixture(t, 64, func(t *testing.T, f fixture) {
		ctx := context.Background()
		opts := func(id string) scan.OwnershipOptions {
			return scan.OwnershipOptions{ReplicaID: id, Heartbeat: 50 * time.Millisecond, SlotLease: 300 * time.Millisecond}
		}
		type replica struct {
			own    *scan.Ownership
			cancel context.CancelFunc
			done   chan struct{}
		}
		start := func(id string) replica {
			rctx, cancel := context.WithCancel(ctx)
			r := replica{own: scan.NewOwnership(f.Store, opts(id)), cancel: cancel, done: make(chan struct{})}
			go func() { defer close(r.done); _ = r.own.Run(rctx) }()
			return r
		}
		rs := []replica{start("a"), start("b"), start("c")}
		defer func() {
			for _, r := range rs {
				r.cancel()
				<-r.done
			}
		}()
		disjointCover := func(want []replica) bool {
			seen := map[int]int{}
			for _, r := range want {
				for _, s := range r.own.Slots() {
					seen[s]++
				}
			}
			if len(seen) != 64 {
				return false
			}
			for _, n := range seen {
				if n != 1 {
					return false
				}
			}
			return true
		}
		allHold := func() bool {
			for _, r := range rs {
				if len(r.own.Slots()) == 0 {
					return false
				}
			}
			return disjointCover(rs)
		}
		require.Eventually(t, allHold, 10*time.Second, 20*time.Millisecond, "three replicas share 64 slots")

		// Graceful stop: b's slots move to a and c.
		rs[1].cancel()
		<-rs[1].done
		require.Empty(t, rs[1].own.Slots())
		require.Eventually(t, func() bool { return disjointCover([]replica{rs[0], rs[2]}) }, 10*time.Second, 20*time.Millisecond)

		// A lease held by a dead replica blocks the slot until it lapses.
		for s := range 64 {
			require.NoError(t, f.RDB.Set(ctx, ownerKey(s), "ghost", 0).Err())
		}
		require.Eventually(t, func() bool { return len(rs[0].own.Slots())+len(rs[2].own.Slots()) == 0 }, 10*time.Second, 20*time.Millisecond,
			"a slot leased to another replica is not scanned")
		for s := range 64 {
			require.NoError(t, f.RDB.PExpire(ctx, ownerKey(s), 100*time.Millisecond).Err())
		}
		require.Eventually(t, func() bool { return disjointCover([]replica{rs[0], rs[2]}) }, 10*time.Second, 20*time.Millisecond, fmt.Sprint("taken over after the lease lapsed"))
	})
}

// TestOwnershipStepsAsideWhenNotEligible: a replica that may not scan (its clock cannot be trusted)
// releases its slots and leaves the replica set, so the others scan them; it takes its share back once
// it may again.
func TestOwnershipStepsAsideWhenNotEligible(t *testing.T) {
	eachFixture(t, 16, func(t *testing.T, f fixture) {
		ctx, cancel := context.WithCancel(context.Background())
		var eligible atomic.Bool
		eligible.Store(true)
		a := scan.NewOwnership(f.Store, scan.OwnershipOptions{ReplicaID: "a", Heartbeat: 50 * time.Millisecond, SlotLease: 300 * time.Millisecond})
		b := scan.NewOwnership(f.Store, scan.OwnershipOptions{ReplicaID: "b", Heartbeat: 50 * time.Millisecond, SlotLease: 300 * time.Millisecond,
			Eligible: eligible.Load})
		var wg sync.WaitGroup
		for _, o := range []*scan.Ownership{a, b} {
			wg.Go(func() { _ = o.Run(ctx) })
		}
		defer func() { cancel(); wg.Wait() }()
		shared := func() bool { return len(a.Slots()) > 0 && len(b.Slots()) > 0 && len(a.Slots())+len(b.Slots()) == 16 }
		require.Eventually(t, shared, 10*time.Second, 20*time.Millisecond)

		eligible.Store(false)
		require.Eventually(t, func() bool { return len(b.Slots()) == 0 && len(a.Slots()) == 16 }, 10*time.Second, 20*time.Millisecond,
			"the ineligible replica's slots go to the other")
		live, err := f.RDB.ZRange(ctx, config.DefaultKeyPrefix+":replicas", 0, -1).Result()
		require.NoError(t, err)
		require.Equal(t, []string{"a"}, live)

		eligible.Store(true)
		require.Eventually(t, shared, 10*time.Second, 20*time.Millisecond, "eligible again: the slots are shared again")
	})
}

// ownerKey is slot's lease key as internal/replicaset writes it (its keys.go), for a lease a replica
// that died left behind.
func ownerKey(slot int) string { return fmt.Sprintf("%s:owner:{%d}", config.DefaultKeyPrefix, slot) }

// TestOwnershipTakesADeadReplicasSlotsWhenItsMarkLapses: a replica that died (its alive mark and slot
// leases left behind, renewed no more) loses its slots the moment its mark lapses, not at the survivor's
// next heartbeat, so a takeover takes one slot lease however long the heartbeat is.
func TestOwnershipTakesADeadReplicasSlotsWhenItsMarkLapses(t *testing.T) {
	eachFixture(t, 16, func(t *testing.T, f fixture) {
		ctx, cancel := context.WithCancel(context.Background())
		// A lease must outlive its renewal (NewOwnership): the survivor's heartbeats come at 0, 3 and 6 s.
		const heartbeat, lease = 3 * time.Second, 3500 * time.Millisecond
		died := time.Now()
		require.NoError(t, f.RDB.ZAdd(ctx, config.DefaultKeyPrefix+":replicas", redis.Z{Score: float64(died.UnixMilli()), Member: "ghost"}).Err())
		ghosts := scan.Assign("ghost", []string{"a", "ghost"}, 16)
		require.NotEmpty(t, ghosts)
		for _, s := range ghosts {
			require.NoError(t, f.RDB.Set(ctx, ownerKey(s), "ghost", lease).Err())
		}
		a := scan.NewOwnership(f.Store, scan.OwnershipOptions{ReplicaID: "a", Heartbeat: heartbeat, SlotLease: lease})
		var wg sync.WaitGroup
		wg.Go(func() { _ = a.Run(ctx) })
		defer func() { cancel(); wg.Wait() }()

		require.Eventually(t, func() bool { return len(a.Slots()) >= 16-len(ghosts) }, 5*time.Second, 10*time.Millisecond,
			"a holds its own share")
		require.Eventually(t, func() bool { return len(a.Slots()) == 16 }, time.Until(died.Add(2*heartbeat-time.Second)), 10*time.Millisecond,
			"the ghost's slots are a's once its mark lapses (3.5 s), not at a's heartbeat after that (6 s)")
		t.Logf("taken over %v after the ghost's last mark (lease %v, heartbeat %v)", time.Since(died).Round(time.Millisecond), lease, heartbeat)
	})
}
