package sweep_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/sweep"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/internal/testenv/deadlinetest"
)

// TestMain stops the Redis Cluster the tests share (see testenv.RedisBackends).
func TestMain(m *testing.M) { testenv.Main(m) }

// fixture is the shared one (deadlinetest.Fixture): an empty Redis, a test clock and a store whose
// devices are all of type gateway, silent after 30 s.
type fixture = *deadlinetest.Fixture

const gatewayTimeout = 30 * time.Second

// eachFixture runs test once per Redis backend, each time on an empty Redis with a store of slots slots.
func eachFixture(t *testing.T, slots int, test func(t *testing.T, f fixture)) {
	t.Helper()
	deadlinetest.Each(t, deadline.Options{Slots: slots, Timeout: func(string) time.Duration { return gatewayTimeout }},
		[]string{deadline.DefaultType, "gateway"}, test)
}

// sweeper is a sweeper of f's store over every slot, unpaced, with opts's other options.
func sweeper(f fixture, opts sweep.Options) *sweep.Sweeper {
	opts.Store = f.Store
	if opts.Slots == nil {
		opts.Slots = func() []int { return testenv.AllSlots(f.Store.Slots()) }
	}
	opts.Share = 1
	return sweep.New(opts)
}

// claimOne signals dev, lets its deadline pass and claims it.
func claimOne(t *testing.T, f fixture, dev string) deadline.Claim {
	t.Helper()
	f.Refresh(t, deadline.Signal{Device: dev, Type: "gateway", Seen: f.Clock.Now()})
	f.Clock.Advance(gatewayTimeout + time.Second)
	res := f.ClaimAll(t, deadline.ClaimOptions{})
	require.Len(t, res.Claims, 1)
	return res.Claims[0]
}

// ack applies a and settles c: the alarm loop's handling of c is over.
func ack(t *testing.T, f fixture, c deadline.Claim, a deadline.Ack) {
	t.Helper()
	applied, err := f.Store.Settle(context.Background(), []deadline.Ack{a}, deadline.RecordsOf([]deadline.Claim{c}))
	require.NoError(t, err)
	require.Equal(t, []bool{true}, applied)
}

// nextAct is when dev's incident is acted on next (zero: dormant or parked).
func nextAct(t *testing.T, f fixture, dev string) time.Time {
	t.Helper()
	d, found, err := f.Store.Device(context.Background(), dev)
	require.NoError(t, err)
	require.True(t, found, dev)
	return d.NextAct
}
