// Package deadlinetest opens deadline stores for tests and holds the fixture the suites on Redis share
// (Fixture). It is apart from internal/testenv because internal/config's own tests import testenv, and
// internal/deadline imports internal/config: testenv must not import internal/deadline.
package deadlinetest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// NewStore is a deadline store on rdb with types registered, as the daemon has it once its policies are
// loaded; it fails tb on any error. The options carry what a suite varies: slots, clock, timeouts.
// internal/deadline's own tests use it from package deadline_test only (an in-package test would import cycle).
func NewStore(tb testing.TB, rdb redis.UniversalClient, opts deadline.Options, types ...string) *deadline.Store {
	tb.Helper()
	store, err := deadline.New(rdb, opts)
	if err != nil {
		tb.Fatalf("deadlinetest: deadline store: %v", err)
	}
	if err := store.Load(context.Background(), types...); err != nil {
		tb.Fatalf("deadlinetest: register types %v: %v", types, err)
	}
	return store
}

// T0 is when a Fixture's clock starts.
var T0 = time.UnixMilli(1_795_340_000_000)

// Fixture is what the suites on Redis share (internal/deadline's, internal/silence's, internal/alarm's,
// internal/correlate's): an empty Redis, a clock starting at T0 that the store and the test share, and a
// deadline store on both. A suite with more parts embeds it and adds them.
type Fixture struct {
	RDB   redis.UniversalClient
	Clock *testenv.Clock
	T0    time.Time
	Store *deadline.Store
}

// Each runs test once per Redis backend (testenv.EachBackend), each time on an empty Redis with a
// fresh fixture whose store has opts (Now defaults to the fixture's clock) and types registered.
func Each(t *testing.T, opts deadline.Options, types []string, test func(t *testing.T, f *Fixture)) {
	t.Helper()
	testenv.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) { test(t, Open(t, rdb, opts, types...)) })
}

// Open is a fixture on rdb whose store has opts (Now defaults to the fixture's clock) and types
// registered.
func Open(tb testing.TB, rdb redis.UniversalClient, opts deadline.Options, types ...string) *Fixture {
	tb.Helper()
	f := &Fixture{RDB: rdb, Clock: testenv.NewClock(T0), T0: T0}
	if opts.Now == nil {
		opts.Now = f.Clock.Now
	}
	f.Store = NewStore(tb, rdb, opts, types...)
	return f
}

// Signal records a signal of device at the given offset from T0.
func (f *Fixture) Signal(tb testing.TB, device, typ string, at time.Duration) {
	tb.Helper()
	f.Refresh(tb, deadline.Signal{Device: device, Type: typ, Seen: f.T0.Add(at)})
}

// Refresh stores signals.
func (f *Fixture) Refresh(tb testing.TB, signals ...deadline.Signal) {
	tb.Helper()
	if err := f.Store.Refresh(context.Background(), signals); err != nil {
		tb.Fatalf("deadlinetest: refresh: %v", err)
	}
}

// ClaimAll claims in every slot with opts, as one scanner owning them all would: Now defaults to the
// clock's, Lease to 30s, Batch to 256.
func (f *Fixture) ClaimAll(tb testing.TB, opts deadline.ClaimOptions) deadline.ClaimResult {
	tb.Helper()
	if opts.Now.IsZero() {
		opts.Now = f.Clock.Now()
	}
	if opts.Lease == 0 {
		opts.Lease = 30 * time.Second
	}
	if opts.Batch == 0 {
		opts.Batch = 256
	}
	res, err := f.Store.Claim(context.Background(), testenv.AllSlots(f.Store.Slots()), opts)
	if err != nil {
		tb.Fatalf("deadlinetest: claim: %v", err)
	}
	return res
}

// DeferAll claims every due incident and schedules each one's next act (its first repeat) at the time
// next gives its device, as the alarm loop does for the incidents a silence covers
// (internal/alarm/decide.go).
func (f *Fixture) DeferAll(tb testing.TB, next func(device string) time.Time) {
	tb.Helper()
	res := f.ClaimAll(tb, deadline.ClaimOptions{})
	acks := make([]deadline.Ack, 0, len(res.Claims))
	for _, c := range res.Claims {
		st := c.State
		st.Next = 1
		acks = append(acks, deadline.Ack{Device: c.Device, Slot: c.Slot, Op: deadline.Reschedule, Claimed: c.State.Deadline,
			Next: next(c.Device), State: st})
	}
	if _, err := f.Store.Settle(context.Background(), acks, deadline.RecordsOf(res.Claims)); err != nil {
		tb.Fatalf("deadlinetest: settle: %v", err)
	}
}
