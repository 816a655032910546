package deadline_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/internal/testenv/deadlinetest"
)

var byType = testenv.TypeTimeouts(map[string]time.Duration{"default": 60 * time.Second, "gateway": 30 * time.Second, "sensor": 10 * time.Minute})

// timeoutOf times the fixture's types (the store applies a device's own timeout itself).
func timeoutOf(name string) time.Duration { return byType(name) }

// fixture is the shared one (deadlinetest.Fixture): a store of the test types on an empty Redis, timed
// by timeoutOf, and the clock it shares with the test.
type fixture struct{ *deadlinetest.Fixture }

// testTypes are the types the fixture's stores register.
var testTypes = []string{"default", "gateway", "sensor"}

// TestMain stops the Redis Cluster the tests share (see testenv.RedisBackends).
func TestMain(m *testing.M) { testenv.Main(m) }

// eachFixture runs test once per Redis backend (deadlinetest.Each), each time on an empty Redis with
// a store of slots slots.
func eachFixture(t *testing.T, slots int, test func(t *testing.T, f fixture)) {
	t.Helper()
	deadlinetest.Each(t, deadline.Options{Slots: slots, Timeout: timeoutOf}, testTypes,
		func(t *testing.T, base *deadlinetest.Fixture) { test(t, fixture{base}) })
}

// setup is a fixture on rdb with a store of slots slots.
func setup(tb testing.TB, rdb redis.UniversalClient, slots int) fixture {
	tb.Helper()
	return fixture{deadlinetest.Open(tb, rdb, deadline.Options{Slots: slots, Timeout: timeoutOf}, testTypes...)}
}

// fixtureStore returns a store on rdb timed by timeoutOf, with the test types registered; repeatEvery nil
// commits without repeats.
func fixtureStore(tb testing.TB, rdb redis.UniversalClient, slots int, now func() time.Time, repeatEvery func(string) time.Duration) *deadline.Store {
	tb.Helper()
	opts := deadline.Options{Slots: slots, Now: now, Timeout: timeoutOf, RepeatEvery: repeatEvery}
	return deadlinetest.NewStore(tb, rdb, opts, testTypes...)
}

// withRepeats is f with a store that commits gateway incidents with a one-minute repeat interval and
// every other type without repeats, as the daemon's policies would.
func withRepeats(t *testing.T, f fixture) fixture {
	t.Helper()
	f.Store = fixtureStore(t, f.RDB, f.Store.Slots(), f.Clock.Now, func(typ string) time.Duration {
		if typ == "gateway" {
			return time.Minute
		}
		return 0
	})
	return f
}

// claimOne makes dev silent and claims it.
func claimOne(t *testing.T, f fixture, dev string) deadline.Claim {
	t.Helper()
	f.Refresh(t, deadline.Signal{Device: dev, Type: "gateway", Seen: f.Clock.Now()})
	f.Clock.Advance(31 * time.Second)
	res := f.ClaimAll(t, deadline.ClaimOptions{})
	require.Len(t, res.Claims, 1)
	return res.Claims[0]
}

// fleet is n signals of devices prefix0, prefix1, … seen at seen, device i of type typeOf(i).
func fleet(n int, prefix string, seen time.Time, typeOf func(i int) string) []deadline.Signal {
	sigs := make([]deadline.Signal, n)
	for i := range sigs {
		sigs[i] = deadline.Signal{Device: fmt.Sprint(prefix, i), Type: typeOf(i), Seen: seen}
	}
	return sigs
}

// gateways is a fleet type function: every device a gateway.
func gateways(int) string { return "gateway" }

// replicas returns f.Store and n-1 more stores on its Redis and clock, each having read the layout of
// slots, as the replicas of one deployment have.
func (f fixture) replicas(t *testing.T, slots, n int) []*deadline.Store {
	t.Helper()
	stores := []*deadline.Store{f.Store}
	for range n - 1 {
		stores = append(stores, fixtureStore(t, f.RDB, slots, f.Clock.Now, nil))
	}
	for _, s := range stores {
		_, err := s.SyncLayout(t.Context(), slots)
		require.NoError(t, err)
	}
	return stores
}

// device returns what Redis knows of id and whether it knows anything.
func (f fixture) device(t *testing.T, id string) (deadline.Device, bool) {
	t.Helper()
	d, found, err := f.Store.Device(context.Background(), id)
	require.NoError(t, err)
	return d, found
}

// ack applies acks and returns which of them took effect.
func (f fixture) ack(t *testing.T, acks ...deadline.Ack) []bool {
	t.Helper()
	applied, err := f.Store.Acknowledge(context.Background(), acks)
	require.NoError(t, err)
	return applied
}

// reschedule is the ack that keeps c's incident open with state st and acts on it again at next.
func reschedule(c deadline.Claim, st deadline.State, next time.Time) deadline.Ack {
	return deadline.Ack{Device: c.Device, Slot: c.Slot, Op: deadline.Reschedule, Claimed: c.State.Deadline, Next: next, State: st}
}

// remove is the ack that ends c's incident.
func remove(c deadline.Claim) deadline.Ack {
	return deadline.Ack{Device: c.Device, Slot: c.Slot, Op: deadline.Remove, Claimed: c.State.Deadline}
}

// sentOnce is c's state once its interruption is published: repeat 1 is next.
func sentOnce(c deadline.Claim) deadline.State {
	st := c.State
	st.Next = 1
	return st
}

// settle releases the in-flight records of claims, their whole acknowledgement when committed.
func (f fixture) settle(t *testing.T, claims ...deadline.Claim) {
	t.Helper()
	_, err := f.Store.Settle(context.Background(), nil, deadline.RecordsOf(claims))
	require.NoError(t, err)
}

func devices(claims []deadline.Claim) []string {
	var out []string
	for _, c := range claims {
		out = append(out, c.Device)
	}
	sort.Strings(out)
	return out
}
