package deadline_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

func TestRefreshedDeviceIsNeverClaimed(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		for range 5 {
			f.Refresh(t, deadline.Signal{Device: "alive", Type: "gateway", Seen: f.Clock.Now()})
			f.Clock.Advance(29 * time.Second)
			res := f.ClaimAll(t, deadline.ClaimOptions{})
			require.Empty(t, res.Claims)
		}
	})
}

func TestSilentDeviceClaimedOnceWithDeadlineAndType(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		t0 := f.Clock.Now()
		f.Refresh(t, deadline.Signal{Device: "s1", Type: "gateway", Seen: t0})
		f.Clock.Advance(30 * time.Second)
		res := f.ClaimAll(t, deadline.ClaimOptions{})
		require.Len(t, res.Claims, 1)
		c := res.Claims[0]
		require.Equal(t, "s1", c.Device)
		require.Equal(t, "gateway", c.Type)
		require.True(t, c.Fresh)
		require.Equal(t, t0.Add(30*time.Second).UnixMilli(), c.State.Deadline)
		require.Equal(t, deadline.Slot("s1", 8), c.Slot)
		require.Empty(t, f.ClaimAll(t, deadline.ClaimOptions{}).Claims, "claimed once")
	})
}

func TestWatermarkHoldsBackLaterDeadlines(t *testing.T) {
	eachFixture(t, 4, func(t *testing.T, f fixture) {
		t0 := f.Clock.Now()
		f.Refresh(t,
			deadline.Signal{Device: "early", Type: "gateway", Seen: t0},
			deadline.Signal{Device: "late", Type: "gateway", Seen: t0.Add(10 * time.Second)})
		f.Clock.Advance(time.Minute)
		res := f.ClaimAll(t, deadline.ClaimOptions{Watermark: t0.Add(35 * time.Second)})
		require.Equal(t, []string{"early"}, devices(res.Claims))
		require.Equal(t, []string{"late"}, devices(f.ClaimAll(t, deadline.ClaimOptions{}).Claims))
	})
}

// TestWatermarkPerTimeout: after a blind window, each device waits its own timeout. A gateway (30 s)
// released by its watermark is claimed although sensors (10 min) due before it stay held, and the
// sensors are claimed once their own watermark passes their deadlines.
func TestWatermarkPerTimeout(t *testing.T) {
	eachFixture(t, 1, func(t *testing.T, f fixture) {
		t0 := f.Clock.Now()
		blindFrom := t0.Add(-time.Minute)
		// Sensors whose deadlines (t0 + 5 s) fell after the window's start, ahead of the gateway's (t0 + 40 s).
		var sensors []deadline.Signal
		for i := range 20 {
			sensors = append(sensors, deadline.Signal{Device: fmt.Sprintf("sensor-%d", i), Type: "sensor", Seen: t0.Add(-10*time.Minute + 5*time.Second)})
		}
		f.Refresh(t, sensors...)
		f.Refresh(t, deadline.Signal{Device: "gw", Type: "gateway", Seen: t0.Add(10 * time.Second)},
			deadline.Signal{Device: "old", Type: "gateway", Seen: blindFrom.Add(-time.Minute)})
		f.Clock.Advance(time.Minute)
		held := func(timeout time.Duration) time.Time {
			if timeout > 30*time.Second {
				return blindFrom // still in its grace: nothing after the window's start
			}
			return f.Clock.Now()
		}
		res := f.ClaimAll(t, deadline.ClaimOptions{WatermarkFor: held, Batch: 8})
		require.Equal(t, []string{"gw", "old"}, devices(res.Claims), "the gateways, past held sensors; the old one by the common watermark")
		require.Zero(t, res.NextDeadline, "the held sensors are no deadline to wake for")
		require.Empty(t, f.ClaimAll(t, deadline.ClaimOptions{WatermarkFor: held}).Claims, "the sensors stay held")

		res = f.ClaimAll(t, deadline.ClaimOptions{WatermarkFor: func(time.Duration) time.Time { return f.Clock.Now() }})
		require.Len(t, res.Claims, len(sensors), "released")
	})
}

// TestClaimPastHeldMembersLeavesThemInPlace: the members a claim takes past the common watermark, before
// and after held ones, leave the deadlines set; the held ones stay, each with its deadline, for the claim
// that releases them.
func TestClaimPastHeldMembersLeavesThemInPlace(t *testing.T) {
	eachFixture(t, 1, func(t *testing.T, f fixture) {
		t0 := f.Clock.Now()
		blindFrom := t0.Add(-time.Minute)
		at := func(prefix, typ string, n int, deadline time.Time) []deadline.Signal {
			return fleet(n, prefix, deadline.Add(-timeoutOf(typ)), func(int) string { return typ })
		}
		old := at("old-", "gateway", 2, blindFrom.Add(-time.Second))   // due by the common watermark
		before := at("before-", "gateway", 5, t0.Add(5*time.Second))   // due by their own, before the held
		sensors := at("sensor-", "sensor", 10, t0.Add(10*time.Second)) // held
		after := at("after-", "gateway", 5, t0.Add(20*time.Second))    // due by their own, after the held
		f.Refresh(t, slices.Concat(old, before, sensors, after)...)
		names := func(sigs ...deadline.Signal) []string {
			var out []string
			for _, s := range sigs {
				out = append(out, s.Device)
			}
			slices.Sort(out)
			return out
		}
		f.Clock.Advance(time.Minute)
		held := func(timeout time.Duration) time.Time {
			if timeout > 30*time.Second {
				return blindFrom
			}
			return f.Clock.Now()
		}

		res := f.ClaimAll(t, deadline.ClaimOptions{WatermarkFor: held, Batch: 64})
		require.Equal(t, names(slices.Concat(old, before, after)...), devices(res.Claims))
		left, err := f.RDB.ZRange(context.Background(), f.Store.Keys().Deadlines(0), 0, -1).Result()
		require.NoError(t, err)
		require.Equal(t, names(sensors...), left, "only the held sensors are left")

		res = f.ClaimAll(t, deadline.ClaimOptions{WatermarkFor: func(time.Duration) time.Time { return f.Clock.Now() }})
		require.Len(t, res.Claims, len(sensors), "released")
		for _, c := range res.Claims {
			require.Equal(t, t0.Add(10*time.Second), c.State.DeadlineTime(), c.Device)
		}
	})
}

// TestWatermarkPerTimeoutBoundsTheStepOver: a slot whose held members outnumber what one claim steps
// over claims nothing past them, and says it is held back, rather than reading the whole slot.
func TestWatermarkPerTimeoutBoundsTheStepOver(t *testing.T) {
	eachFixture(t, 1, func(t *testing.T, f fixture) {
		t0 := f.Clock.Now()
		var sensors []deadline.Signal
		for i := range 100 {
			sensors = append(sensors, deadline.Signal{Device: fmt.Sprintf("sensor-%03d", i), Type: "sensor", Seen: t0.Add(-10*time.Minute + 5*time.Second)})
		}
		f.Refresh(t, sensors...)
		f.Refresh(t, deadline.Signal{Device: "gw", Type: "gateway", Seen: t0})
		f.Clock.Advance(time.Minute)
		held := func(timeout time.Duration) time.Time {
			if timeout > 30*time.Second {
				return t0.Add(-5 * time.Minute)
			}
			return f.Clock.Now()
		}
		res := f.ClaimAll(t, deadline.ClaimOptions{WatermarkFor: held, Batch: 4})
		require.Empty(t, res.Claims, "100 held members are more than 4 × 4 stepped over")
		res = f.ClaimAll(t, deadline.ClaimOptions{WatermarkFor: held, Batch: 64})
		require.Equal(t, []string{"gw"}, devices(res.Claims))
	})
}

// TestNextDeadlineSkipsHeldTypes: while hold-back holds the sensors, the next deadline a claim reports,
// and a peek's per slot, is the first after now of a type it does not hold, so the scanner wakes for a
// gateway's deadline instead of polling; past nextScanBound held members, or while every type is held,
// they report none.
func TestNextDeadlineSkipsHeldTypes(t *testing.T) {
	eachFixture(t, 1, func(t *testing.T, f fixture) {
		t0 := f.Clock.Now()
		heldSince := t0.Add(-time.Minute)
		sensorsDueFrom := func(first, n int) {
			var sensors []deadline.Signal
			for i := first; i < first+n; i++ { // due t0 + 2 s, 3 s, …: after now, before the gateway
				sensors = append(sensors, deadline.Signal{Device: fmt.Sprintf("sensor-%02d", i), Type: "sensor", Seen: t0.Add(-10*time.Minute + time.Duration(2+i)*time.Second)})
			}
			f.Refresh(t, sensors...)
		}
		sensorsDueFrom(0, 2)
		f.Refresh(t, deadline.Signal{Device: "gw", Type: "gateway", Seen: t0})
		sensorsHeld := func(timeout time.Duration) time.Time {
			if timeout > 30*time.Second {
				return heldSince
			}
			return f.Clock.Now()
		}
		next := func(wm deadline.WatermarkFunc) (claimed, peeked time.Time) {
			res := f.ClaimAll(t, deadline.ClaimOptions{WatermarkFor: wm})
			require.Empty(t, res.Claims)
			_, p, err := f.Store.Peek(context.Background(), testenv.AllSlots(1), deadline.ClaimOptions{Now: f.Clock.Now(), WatermarkFor: wm})
			require.NoError(t, err)
			return res.NextDeadline, p.SlotNext[0]
		}
		gateway := t0.Add(30 * time.Second).UnixMilli()
		claimed, peeked := next(sensorsHeld)
		require.Equal(t, gateway, claimed.UnixMilli(), "the gateway's deadline, past 2 held sensors")
		require.Equal(t, gateway, peeked.UnixMilli(), "a peek finds it too")

		claimed, peeked = next(nil)
		require.Equal(t, t0.Add(2*time.Second).UnixMilli(), claimed.UnixMilli(), "nothing held: the first sensor's")
		require.Equal(t, claimed, peeked)

		claimed, peeked = next(func(time.Duration) time.Time { return heldSince })
		require.Zero(t, claimed, "every type held: the scanner polls")
		require.Zero(t, peeked)

		sensorsDueFrom(2, 3)
		claimed, peeked = next(sensorsHeld)
		require.Zero(t, claimed, "5 held sensors ahead of the gateway: more than a claim reads, the scanner polls")
		require.Zero(t, peeked)
	})
}

func TestConcurrentClaimersClaimEachDeviceOnce(t *testing.T) {
	const n = 100_000
	eachFixture(t, 64, func(t *testing.T, f fixture) {
		ctx := context.Background()
		for batch := range slices.Chunk(fleet(n, "dev-", f.Clock.Now(), gateways), 1000) {
			f.Refresh(t, batch...)
		}
		f.Clock.Advance(time.Minute)
		var mu sync.Mutex
		seen := make(map[string]int, n)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for {
					res, err := f.Store.Claim(ctx, testenv.AllSlots(64), deadline.ClaimOptions{Now: f.Clock.Now(), Lease: time.Hour, Batch: 128})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					for _, c := range res.Claims {
						seen[c.Device]++
					}
					mu.Unlock()
					if len(res.Claims) == 0 && !res.More {
						return
					}
				}
			})
		}
		wg.Wait()
		require.Len(t, seen, n)
		for d, k := range seen {
			if k != 1 {
				t.Fatalf("%s claimed %d times", d, k)
			}
		}
	})
}

// requireSameState fails the test when a redelivered claim's state differs from the first delivery's.
func requireSameState(t *testing.T, first, again deadline.State) {
	t.Helper()
	if diff := cmp.Diff(first, again); diff != "" {
		t.Fatalf("redelivered state differs (-first +again):\n%s", diff)
	}
}

// Dormant incidents (no repeats here) are scored DormantAfter + the time they went dormant, and an
// entry scored +inf reads the same: neither is ever due nor shown as a next act.
func TestDormantEntriesAreNeverDue(t *testing.T) {
	eachFixture(t, 1, func(t *testing.T, f fixture) {
		ctx := context.Background()
		f.settle(t, claimOne(t, f, "new"))
		act, err := f.RDB.ZScore(ctx, f.Store.Keys().Alarms(0), "new").Result()
		require.NoError(t, err)
		require.Equal(t, float64(deadline.DormantAfter+f.Clock.Now().UnixMilli()), act)

		f.settle(t, claimOne(t, f, "old"))
		require.NoError(t, f.RDB.ZAdd(ctx, f.Store.Keys().Alarms(0), redis.Z{Score: math.Inf(1), Member: "old"}).Err())

		for _, dev := range []string{"new", "old"} {
			d, _ := f.device(t, dev)
			require.True(t, d.NextAct.IsZero(), "%s: dormant", dev)
		}
		f.Clock.Advance(100 * 365 * 24 * time.Hour)
		res := f.ClaimAll(t, deadline.ClaimOptions{})
		require.Empty(t, res.Claims, "dormant entries are never due")
		require.True(t, res.NextAlarm.IsZero(), "and never the next alarm")
	})
}

// Due alarm entries come back with their state in one claim; an entry whose state is gone (an orphan
// left by an interrupted delete) is dropped, not handed out, and does not hide the others.
func TestDueAlarmEntriesClaimedAndOrphansDropped(t *testing.T) {
	eachFixture(t, 1, func(t *testing.T, f fixture) {
		ctx := context.Background()
		for _, dev := range []string{"a", "b"} {
			c := claimOne(t, f, dev)
			require.Equal(t, []bool{true}, f.ack(t, reschedule(c, sentOnce(c), f.Clock.Now().Add(time.Minute))))
		}
		alarms := f.Store.Keys().Alarms(0)
		require.NoError(t, f.RDB.ZAdd(ctx, alarms, redis.Z{Score: float64(f.Clock.Now().UnixMilli()), Member: "orphan"}).Err())
		f.Clock.Advance(2 * time.Minute)
		res := f.ClaimAll(t, deadline.ClaimOptions{})
		require.ElementsMatch(t, []string{"a", "b"}, devices(res.Claims))
		for _, c := range res.Claims {
			require.False(t, c.Fresh)
			require.Equal(t, 1, c.State.Next, "%s: the state the ack wrote", c.Device)
		}
		n, err := f.RDB.ZScore(ctx, alarms, "orphan").Result()
		require.ErrorIs(t, err, redis.Nil, "orphan still in the alarms set with score %v", n)
		require.Empty(t, f.ClaimAll(t, deadline.ClaimOptions{}).Claims, "the returned entries are leased")
	})
}

func TestReplayedOldSignalDoesNotOpenIncident(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		t0 := f.Clock.Now()
		c := claimOne(t, f, "d")
		// A replay of a signal older than the open incident puts the device back with a passed deadline.
		f.Refresh(t, deadline.Signal{Device: "d", Seen: t0.Add(-time.Minute)})
		res := f.ClaimAll(t, deadline.ClaimOptions{})
		for _, cl := range res.Claims {
			require.False(t, cl.Fresh, "no new incident from a replay")
			require.Equal(t, c.State.Deadline, cl.State.Deadline)
		}
	})
}

func TestNewIncidentReportsReplacedOne(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		c := claimOne(t, f, "d")
		f.ack(t, reschedule(c, sentOnce(c), f.Clock.Now().Add(time.Hour)))
		// Signals, then falls silent again before the recovery was handled.
		f.Refresh(t, deadline.Signal{Device: "d", Seen: f.Clock.Now()})
		f.Clock.Advance(31 * time.Second)
		res := f.ClaimAll(t, deadline.ClaimOptions{})
		require.Len(t, res.Claims, 1)
		require.True(t, res.Claims[0].Fresh)
		require.NotNil(t, res.Claims[0].Replaced)
		require.Equal(t, c.State.Deadline, res.Claims[0].Replaced.Deadline)
		require.Equal(t, 1, res.Claims[0].Replaced.Next)
	})
}

// A new incident that replaces an open one keeps owing the old one's recovery in Redis: the claim that
// hands it out again after its lease (a crash before publishing) still carries it. What is owed depends on
// what consumers saw of the old incident (State.Owed).
func TestReplacingIncidentOwesRecoveryAcrossHandOuts(t *testing.T) {
	cases := []struct {
		name       string
		old        func(c deadline.Claim) (deadline.State, bool) // the old incident as acknowledged; false: left committed
		owed       func(c deadline.Claim) int64
		owedWarned bool
	}{
		{"committed interruption", func(c deadline.Claim) (deadline.State, bool) { return c.State, false },
			func(c deadline.Claim) int64 { return c.State.Deadline }, false},
		{"reported interruption", func(c deadline.Claim) (deadline.State, bool) { return sentOnce(c), true },
			func(c deadline.Claim) int64 { return c.State.Deadline }, false},
		{"reported late only", func(c deadline.Claim) (deadline.State, bool) {
			st := c.State
			st.Hold, st.InterruptedAt = deadline.HoldLate, c.State.Deadline+10_000
			return st, true
		}, func(c deadline.Claim) int64 { return c.State.Deadline }, true},
		{"deferred, nothing sent", func(c deadline.Claim) (deadline.State, bool) {
			st := c.State
			st.Hold, st.InterruptedAt = deadline.HoldQuiet, c.State.Deadline+3_600_000
			return st, true
		}, func(deadline.Claim) int64 { return 0 }, false},
		{"nothing sent, owing an earlier one", func(c deadline.Claim) (deadline.State, bool) {
			st := c.State
			st.Owed, st.OwedWarned = c.State.Deadline-60_000, true
			return st, true
		}, func(c deadline.Claim) int64 { return c.State.Deadline - 60_000 }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eachFixture(t, 8, func(t *testing.T, f fixture) {
				c := claimOne(t, f, "d")
				if st, ok := tc.old(c); ok {
					f.ack(t, reschedule(c, st, f.Clock.Now().Add(time.Hour)))
				}
				f.settle(t, c)
				// Signals, then falls silent again before anything settled the old incident.
				f.Refresh(t, deadline.Signal{Device: "d", Seen: f.Clock.Now()})
				f.Clock.Advance(31 * time.Second)
				res := f.ClaimAll(t, deadline.ClaimOptions{})
				require.Len(t, res.Claims, 1)
				fresh := res.Claims[0]
				require.True(t, fresh.Fresh)
				require.Equal(t, tc.owed(c), fresh.State.Owed, "the fresh claim")
				require.Equal(t, tc.owedWarned, fresh.State.OwedWarned && fresh.State.Owed != 0, "the fresh claim")

				// Nothing acknowledged: after the lease, the script's stored state is handed out again.
				f.Clock.Advance(31 * time.Second)
				res = f.ClaimAll(t, deadline.ClaimOptions{})
				require.Len(t, res.Claims, 1)
				again := res.Claims[0]
				require.False(t, again.Fresh)
				require.Equal(t, fresh.State.Deadline, again.State.Deadline)
				require.Equal(t, fresh.State.Owed, again.State.Owed, "stored by the script as the fresh claim says")
				require.Equal(t, fresh.State.OwedWarned, again.State.OwedWarned)
			})
		})
	}
}

func TestNextDue(t *testing.T) {
	eachFixture(t, 4, func(t *testing.T, f fixture) {
		t0 := f.Clock.Now()
		f.Refresh(t,
			deadline.Signal{Device: "a", Type: "gateway", Seen: t0},
			deadline.Signal{Device: "b", Type: "gateway", Seen: t0.Add(5 * time.Second)},
			deadline.Signal{Device: "c", Type: "default", Seen: t0})
		res := f.ClaimAll(t, deadline.ClaimOptions{})
		require.Equal(t, t0.Add(30*time.Second).UnixMilli(), res.NextDeadline.UnixMilli())
		require.True(t, res.NextAlarm.IsZero())
		f.Clock.Advance(30 * time.Second)
		res = f.ClaimAll(t, deadline.ClaimOptions{Lease: 7 * time.Second})
		require.Equal(t, []string{"a"}, devices(res.Claims))
		require.Equal(t, t0.Add(35*time.Second).UnixMilli(), res.NextDeadline.UnixMilli())
		require.Equal(t, t0.Add(37*time.Second).UnixMilli(), res.NextAlarm.UnixMilli(), "the lease end is the next alarm")

		// Per slot: the earliest of a's lease end, b's and c's deadlines among the devices it holds.
		next := map[string]time.Time{"a": t0.Add(37 * time.Second), "b": t0.Add(35 * time.Second), "c": t0.Add(60 * time.Second)}
		slots := testenv.AllSlots(f.Store.Slots())
		require.Len(t, res.SlotNext, len(slots))
		for i, slot := range slots {
			var want time.Time
			for dev, at := range next {
				if deadline.Slot(dev, f.Store.Slots()) == slot && (want.IsZero() || at.Before(want)) {
					want = at
				}
			}
			require.Equal(t, want.UnixMilli(), res.SlotNext[i].UnixMilli(), "slot %d", slot)
		}
	})
}

// A claim that finds any of its steps missing in Redis loads them all, the held step too though it does not
// run without hold-back: Redis must never run a later step of a claim while it refuses an earlier one (claimsteps.go).
func TestClaimLoadsAllItsStepsWhenRedisLostThem(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		f.Refresh(t, deadline.Signal{Device: "d", Seen: f.Clock.Now()})
		require.NoError(t, f.RDB.ScriptFlush(ctx).Err())
		f.Clock.Advance(time.Hour)
		require.Len(t, f.ClaimAll(t, deadline.ClaimOptions{}).Claims, 1, "no hold-back: the held step does not run")
		loaded, err := f.RDB.ScriptExists(ctx, deadline.ClaimStepHashes()...).Result()
		require.NoError(t, err)
		require.Equal(t, []bool{true, true, true, true}, loaded)
	})
}

func TestBatchLimitReportsMore(t *testing.T) {
	eachFixture(t, 1, func(t *testing.T, f fixture) {
		f.Refresh(t, fleet(10, "d", f.Clock.Now(), gateways)...)
		f.Clock.Advance(time.Minute)
		res := f.ClaimAll(t, deadline.ClaimOptions{Batch: 4})
		require.Len(t, res.Claims, 4)
		require.True(t, res.More)
		res = f.ClaimAll(t, deadline.ClaimOptions{Batch: 4})
		require.Len(t, res.Claims, 4)
		res = f.ClaimAll(t, deadline.ClaimOptions{Batch: 4})
		require.Len(t, res.Claims, 2)
		require.False(t, res.More)
	})
}

// Fresh claims and due alarm entries have a batch each (detection.batch): a slot with more of both hands
// over a batch of each in one claim, and says there is more.
func TestBatchBoundsFreshClaimsAndDueEntriesEach(t *testing.T) {
	eachFixture(t, 1, func(t *testing.T, f fixture) {
		ctx := context.Background()
		f.Refresh(t, fleet(6, "a", f.Clock.Now(), gateways)...)
		f.Clock.Advance(time.Minute)
		first := f.ClaimAll(t, deadline.ClaimOptions{Batch: 6})
		require.Len(t, first.Claims, 6)
		acks := make([]deadline.Ack, len(first.Claims))
		for i, c := range first.Claims {
			acks[i] = reschedule(c, sentOnce(c), f.Clock.Now().Add(time.Second))
		}
		_, err := f.Store.Settle(ctx, acks, deadline.RecordsOf(first.Claims))
		require.NoError(t, err)
		f.Refresh(t, fleet(6, "b", f.Clock.Now(), gateways)...)
		f.Clock.Advance(time.Minute) // six repeats due, six more devices silent

		kinds := func(res deadline.ClaimResult) (fresh, due int) {
			for _, c := range res.Claims {
				if c.Fresh {
					fresh++
				} else {
					due++
				}
			}
			return fresh, due
		}
		res := f.ClaimAll(t, deadline.ClaimOptions{Batch: 4})
		fresh, due := kinds(res)
		require.Equal(t, []int{4, 4}, []int{fresh, due}, "a batch of fresh claims and one of due entries")
		require.True(t, res.More)
		res = f.ClaimAll(t, deadline.ClaimOptions{Batch: 4})
		fresh, due = kinds(res)
		require.Equal(t, []int{2, 2}, []int{fresh, due}, "the rest of each")
		require.False(t, res.More)
	})
}
