package deadline_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/internal/testenv/deadlinetest"
)

// reloadable is a policy table a test changes as a reload does: the store asks it on every signal.
type reloadable struct {
	mu       sync.Mutex
	timeouts map[string]time.Duration
}

func (r *reloadable) timeout(name string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d, ok := r.timeouts[name]; ok {
		return d
	}
	return r.timeouts["default"]
}

func (r *reloadable) set(name string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timeouts[name] = d
}

// retimeFixture is f with a store timed by a reloadable table: default 60 s, gateway and fast 600 s.
func retimeFixture(t *testing.T, f fixture) (fixture, *reloadable) {
	t.Helper()
	policies := &reloadable{timeouts: map[string]time.Duration{"default": time.Minute, "gateway": 600 * time.Second,
		"fast": 3 * time.Second}}
	f.Store = deadlinetest.NewStore(t, f.RDB, deadline.Options{Slots: f.Store.Slots(), Now: f.Clock.Now, Timeout: policies.timeout},
		"default", "gateway", "fast")
	return f, policies
}

// silentAfter advances the clock by d and returns the devices claimed then, their claims settled.
func silentAfter(t *testing.T, f fixture, d time.Duration) []string {
	t.Helper()
	f.Clock.Advance(d)
	claims := f.ClaimAll(t, deadline.ClaimOptions{}).Claims
	f.settle(t, claims...)
	return devices(claims)
}

// A reload that cuts a type's timeout from 600 s to 3 s applies from each device's next signal, typed or
// not: a device that signals after the reload and falls silent is reported 3 s later, not 600 s. One
// that has not signalled since keeps the deadline its last signal set, and its last signal is still the
// one it sent, not a time in the future.
func TestShorterTimeoutAppliesFromTheNextSignal(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		f, policies := retimeFixture(t, f)
		first := f.Clock.Now()
		f.Refresh(t, fleet(3, "gw-", first, gateways)...)
		f.Refresh(t, deadline.Signal{Device: "gw-1", Seen: first}) // untyped: the recorded type

		policies.set("gateway", 3*time.Second)
		require.NoError(t, f.Store.Load(ctx, "default", "gateway", "fast"))
		f.Clock.Advance(time.Second)
		after := f.Clock.Now()
		f.Refresh(t, deadline.Signal{Device: "gw-0", Type: "gateway", Seen: after}, deadline.Signal{Device: "gw-1", Seen: after})

		for _, id := range []string{"gw-0", "gw-1"} {
			d, found := f.device(t, id)
			require.True(t, found, id)
			require.Equal(t, "gateway", d.Type, id)
			require.Equal(t, after.Add(3*time.Second).UnixMilli(), d.Deadline.UnixMilli(), "%s: timed by the reloaded timeout", id)
		}
		stale, _ := f.device(t, "gw-2")
		require.Equal(t, first.Add(600*time.Second).UnixMilli(), stale.Deadline.UnixMilli(), "no signal since: its deadline stands")
		require.Equal(t, first.UnixMilli(), stale.LastSignal.UnixMilli(), "its last signal is the one it sent, not deadline − the new timeout")

		require.Empty(t, silentAfter(t, f, 2*time.Second), "not silent for 3 s yet")
		require.Equal(t, []string{"gw-0", "gw-1"}, silentAfter(t, f, 1100*time.Millisecond))

		// Claimed, their incidents carry the last signal they sent.
		f.Clock.Advance(600 * time.Second)
		res := f.ClaimAll(t, deadline.ClaimOptions{})
		require.Equal(t, []string{"gw-2"}, devices(res.Claims))
		require.Equal(t, first.UnixMilli(), res.Claims[0].LastSignal.UnixMilli(), "the claim's last signal is the one it sent")
	})
}

// A signal older than the one Redis holds never pulls a deadline back, across a timeout change too: the
// later signal under the old, longer timeout stands against an earlier one under the new.
func TestRetimedSignalsKeepOutOfOrderSafety(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		f, policies := retimeFixture(t, f)
		t0 := f.Clock.Now()
		f.Refresh(t, deadline.Signal{Device: "gw", Type: "gateway", Seen: t0.Add(2 * time.Second)})
		policies.set("gateway", 3*time.Second)
		require.NoError(t, f.Store.Load(ctx, "default", "gateway", "fast"))
		f.Clock.Advance(2500 * time.Millisecond)
		f.Refresh(t, deadline.Signal{Device: "gw", Type: "gateway", Seen: t0}) // arrives late: sent before the one stored
		d, _ := f.device(t, "gw")
		require.Equal(t, t0.Add(602*time.Second).UnixMilli(), d.Deadline.UnixMilli(), "an older signal does not pull the deadline back")

		// Same type and timeout: an older signal loses to the newer as ever.
		f.Refresh(t, deadline.Signal{Device: "gw", Type: "gateway", Seen: t0.Add(3 * time.Second)})
		f.Refresh(t, deadline.Signal{Device: "gw", Seen: t0.Add(time.Second)})
		d, _ = f.device(t, "gw")
		require.Equal(t, t0.Add(6*time.Second).UnixMilli(), d.Deadline.UnixMilli())
	})
}

// A signal that names a faster type than the device's recorded one times it by that type at once.
func TestSignalRetypingToAFasterTypeApplies(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		f, _ = retimeFixture(t, f)
		f.Refresh(t, deadline.Signal{Device: "dev", Type: "gateway", Seen: f.Clock.Now()})
		f.Clock.Advance(time.Second)
		now := f.Clock.Now()
		f.Refresh(t, deadline.Signal{Device: "dev", Type: "fast", Seen: now})
		d, _ := f.device(t, "dev")
		require.Equal(t, "fast", d.Type)
		require.Equal(t, now.Add(3*time.Second).UnixMilli(), d.Deadline.UnixMilli())
		require.Equal(t, []string{"dev"}, silentAfter(t, f, 3*time.Second))
	})
}

// A device registered again with a shorter own timeout is timed by it from its next signal.
func TestShorterOwnTimeoutAppliesFromTheNextSignal(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		f, _ = retimeFixture(t, f)
		reg := func(timeout time.Duration) {
			t.Helper()
			_, _, err := f.Store.Register(ctx, []string{"meter"}, []deadline.Registration{{Type: "gateway", TimeoutMs: timeout.Milliseconds()}}, []string{""})
			require.NoError(t, err)
			require.NoError(t, f.Store.SyncOverrides(ctx))
		}
		reg(time.Hour)
		f.Refresh(t, deadline.Signal{Device: "meter", Seen: f.Clock.Now()})
		reg(5 * time.Second)
		f.Clock.Advance(time.Second)
		now := f.Clock.Now()
		f.Refresh(t, deadline.Signal{Device: "meter", Seen: now})
		d, _ := f.device(t, "meter")
		require.Equal(t, 5*time.Second, d.OwnTimeout)
		require.Equal(t, now.Add(5*time.Second).UnixMilli(), d.Deadline.UnixMilli())
		require.Equal(t, []string{"meter"}, silentAfter(t, f, 5*time.Second))
	})
}

// Retiming costs nothing to a device that keeps its type and timeout: a store that remembers it writes
// its untyped signals without a script, as before.
func TestRetimeLeavesTheOrdinarySignalAlone(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.StartRedis(t).Client(t)
	f, _ := retimeFixture(t, setup(t, rdb, 8))
	f.Refresh(t, fleet(100, "d", f.Clock.Now(), gateways)...)
	scripts := scriptCounter(rdb)
	for range 3 {
		f.Clock.Advance(time.Second)
		f.Refresh(t, fleet(100, "d", f.Clock.Now(), func(int) string { return "" })...)
	}
	require.Zero(t, scripts(), "no script call for a remembered device")
	d, _, err := f.Store.Device(ctx, "d7")
	require.NoError(t, err)
	require.Equal(t, f.Clock.Now().Add(600*time.Second).UnixMilli(), d.Deadline.UnixMilli())
}

// Type indexes no device uses any more are freed: 1,100 distinct own timeouts, more than the registry
// holds, each registered, signalled, then deleted or replaced, leave room for a new one, and its device
// is timed by it, not by its type. An index a device still holds is kept, though nothing writes it any
// more: a gateway silent since its type's timeout changed.
func TestUnusedTypeIndexesAreFreed(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		f, policies := retimeFixture(t, f)
		first := f.Clock.Now()
		f.Refresh(t, deadline.Signal{Device: "old-gw", Type: "gateway", Seen: first})
		policies.set("gateway", 2*time.Hour)
		require.NoError(t, f.Store.Load(ctx, "default", "gateway", "fast"))
		reg := func(dev string, timeout time.Duration) error {
			_, _, err := f.Store.Register(ctx, []string{dev}, []deadline.Registration{{Type: "gateway", TimeoutMs: timeout.Milliseconds()}}, []string{""})
			return err
		}
		const owned = 1100
		for i := range owned {
			dev := fmt.Sprint("meter-", i)
			require.NoError(t, reg(dev, time.Duration(i+100)*time.Second), "own timeout %d of %d", i+1, owned)
			f.Refresh(t, deadline.Signal{Device: dev, Seen: f.Clock.Now()})
			if i%2 == 0 {
				_, err := f.Store.Delete(ctx, dev)
				require.NoError(t, err)
			} else { // registered again with the one timeout all the others share: its next signal moves it there
				require.NoError(t, reg(dev, time.Hour))
				f.Refresh(t, deadline.Signal{Device: dev, Seen: f.Clock.Now()})
			}
			f.Clock.Advance(time.Second)
		}
		require.NoError(t, reg("new", 7*time.Second))
		now := f.Clock.Now()
		f.Refresh(t, deadline.Signal{Device: "new", Seen: now})
		d, _ := f.device(t, "new")
		require.Equal(t, 7*time.Second, d.OwnTimeout)
		require.Equal(t, now.Add(7*time.Second).UnixMilli(), d.Deadline.UnixMilli())
		old, _ := f.device(t, "old-gw")
		require.Equal(t, "gateway", old.Type)
		require.Equal(t, first.UnixMilli(), old.LastSignal.UnixMilli(), "its index still says the timeout it was written with")
		require.Equal(t, []string{"new", "old-gw"}, silentAfter(t, f, 7*time.Second))
		kept, _ := f.device(t, "meter-1")
		require.Equal(t, time.Hour, kept.OwnTimeout, "a device still of a timeout keeps it")
	})
}

// An unused type index goes in steps a minute apart: retired, it still resolves, for a replica that has
// not heard of the change; freed, its name is gone from every replica's registry within a sync, but no
// name takes it yet; released, it is free. One used again before it is freed keeps its name.
func TestTypeIndexIsFreedInSteps(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		f, _ = retimeFixture(t, f)
		other := fixtureStore(t, f.RDB, 8, f.Clock.Now, nil)
		own := func(dev string, timeout time.Duration) int {
			t.Helper()
			_, _, err := f.Store.Register(ctx, []string{dev}, []deadline.Registration{{Type: "gateway", TimeoutMs: timeout.Milliseconds()}}, []string{""})
			require.NoError(t, err)
			f.Refresh(t, deadline.Signal{Device: dev, Seen: f.Clock.Now()})
			d, _ := f.device(t, dev)
			require.Equal(t, timeout, d.OwnTimeout)
			idx, err := f.Store.TypeIndex(ctx, "gateway@"+timeout.String())
			require.NoError(t, err)
			return idx
		}
		gone, back := own("a", 5*time.Second), own("b", 6*time.Second)
		require.NoError(t, other.SyncOverrides(ctx))
		for _, dev := range []string{"a", "b"} {
			_, err := f.Store.Delete(ctx, dev)
			require.NoError(t, err)
		}
		mark := func(idx int) bool {
			t.Helper()
			ok, err := f.RDB.HExists(ctx, f.Store.Keys().Types(), fmt.Sprint("\x00retired\x1f", idx)).Result()
			require.NoError(t, err)
			return ok
		}
		step := func() {
			t.Helper()
			require.NoError(t, f.Store.SyncOverrides(ctx)) // as the daemon does every 2 s
			_, err := f.Store.ReclaimTypes(ctx)
			require.NoError(t, err)
			require.NoError(t, other.SyncOverrides(ctx))
		}
		resolves := func(s *deadline.Store, idx int) time.Duration {
			_, own := s.TypeOf(ctx, idx)
			return own
		}

		step()
		require.True(t, mark(gone) && mark(back), "retired")
		require.Equal(t, 5*time.Second, resolves(other, gone), "a retired index still resolves")
		own("b2", 6*time.Second) // its timeout is in use again

		f.Clock.Advance(30 * time.Second)
		step()
		require.Equal(t, 5*time.Second, resolves(other, gone), "not a minute yet")
		f.Clock.Advance(31 * time.Second)
		step()
		require.True(t, mark(gone), "freed, the index is still held")
		require.Zero(t, resolves(other, gone), "freed, its name is gone from the other replica too")
		require.False(t, mark(back), "used again: no longer retired")
		require.Equal(t, 6*time.Second, resolves(other, back))

		f.Clock.Advance(61 * time.Second)
		step()
		require.False(t, mark(gone), "released")
	})
}
