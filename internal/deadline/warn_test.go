package deadline_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/internal/testenv/deadlinetest"
)

// warnedFixture is a fixture whose gateways (30 s timeout) warn after 20 s.
func warnedFixture(t *testing.T) fixture {
	t.Helper()
	rdb := testenv.StartRedis(t).Client(t)
	// The store keeps a device's own timeout's warning only while it is longer (owntimeout.go).
	warnAfter := func(name string) time.Duration {
		if name == "gateway" {
			return 20 * time.Second
		}
		return 0
	}
	return fixture{deadlinetest.Open(t, rdb, deadline.Options{Slots: 4, Timeout: timeoutOf, WarnAfter: warnAfter}, testTypes...)}
}

// A warned type's signals, typed or not, put the score at the warning; other types keep their timeout.
func TestWarnedTypeScoresItsWarning(t *testing.T) {
	f := warnedFixture(t)
	t0 := f.Clock.Now()
	f.Refresh(t, deadline.Signal{Device: "gw", Type: "gateway", Seen: t0}, deadline.Signal{Device: "s", Type: "sensor", Seen: t0})
	d, _ := f.device(t, "gw")
	require.True(t, t0.Add(20*time.Second).Equal(d.Deadline), "typed: seen + warn_after, got %v", d.Deadline)
	d, _ = f.device(t, "s")
	require.True(t, t0.Add(10*time.Minute).Equal(d.Deadline), "no warn_after: seen + timeout")

	f.Refresh(t, deadline.Signal{Device: "gw", Seen: t0.Add(time.Second)}) // untyped: its recorded type
	d, _ = f.device(t, "gw")
	require.True(t, t0.Add(21*time.Second).Equal(d.Deadline), "untyped: seen + warn_after, got %v", d.Deadline)
}

// The claim of a warning is an ordinary fresh claim; acknowledged late (HoldLate), the incident is
// listed open with its true last signal, and its interruption waits for the hold-back.
func TestLateIncidentAndHoldBack(t *testing.T) {
	f := warnedFixture(t)
	ctx := context.Background()
	t0 := f.Clock.Now()
	f.Refresh(t, deadline.Signal{Device: "gw", Type: "gateway", Seen: t0})
	f.Clock.Advance(20 * time.Second)
	res := f.ClaimAll(t, deadline.ClaimOptions{})
	require.Len(t, res.Claims, 1)
	c := res.Claims[0]
	require.True(t, c.Fresh)
	require.Equal(t, t0.Add(20*time.Second).UnixMilli(), c.State.Deadline)

	due := t0.Add(30 * time.Second)
	st := c.State
	st.Hold, st.InterruptedAt = deadline.HoldLate, due.UnixMilli()
	_, err := f.Store.Settle(ctx, []deadline.Ack{reschedule(c, st, due)}, deadline.RecordsOf(res.Claims))
	require.NoError(t, err)

	open, _, err := f.Store.ScanOpenIncidents(ctx, c.Slot, 0, 100)
	require.NoError(t, err)
	require.Len(t, open, 1)
	require.True(t, open[0].Late())
	require.True(t, t0.Equal(open[0].LastSeen()), "last seen %v", open[0].LastSeen())
	require.True(t, t0.Add(20*time.Second).Equal(open[0].Deadline()), "a late incident's events carry the warning")

	f.Clock.Set(due)
	window := func(time.Duration) time.Time { return t0.Add(25 * time.Second) } // a blind window opened at +25 s
	res = f.ClaimAll(t, deadline.ClaimOptions{WatermarkFor: window})
	require.Len(t, res.Claims, 1)
	require.False(t, res.Claims[0].Fresh)
	require.Equal(t, deadline.HoldLate, res.Claims[0].State.Hold)
	require.True(t, res.Claims[0].HeldBack, "its interruption is past what the hold-back allows")

	f.Clock.Advance(time.Minute) // the lease ran out; the window closed
	res = f.ClaimAll(t, deadline.ClaimOptions{WatermarkFor: func(time.Duration) time.Time { return f.Clock.Now() }})
	require.Len(t, res.Claims, 1)
	require.False(t, res.Claims[0].HeldBack)
}

// A registered device of a warned type waits for its warning, with its own timeout too; one whose own
// timeout is not longer than warn_after waits for that timeout.
func TestRegisteredDeviceOfAWarnedType(t *testing.T) {
	f := warnedFixture(t)
	t0 := f.Clock.Now()
	_, _, err := f.Store.Register(context.Background(), []string{"gw-own", "gw-short", "gw-type"}, []deadline.Registration{
		{Type: "gateway", TimeoutMs: (5 * time.Minute).Milliseconds()},
		{Type: "gateway", TimeoutMs: (10 * time.Second).Milliseconds()},
		{Type: "gateway"},
	}, make([]string, 3))
	require.NoError(t, err)
	for dev, want := range map[string]time.Duration{"gw-own": 20 * time.Second, "gw-short": 10 * time.Second, "gw-type": 20 * time.Second} {
		d, found := f.device(t, dev)
		require.True(t, found, dev)
		require.True(t, t0.Add(want).Equal(d.Deadline), "%s: deadline %v, want registration + %v", dev, d.Deadline, want)
	}
}

// Every deferred incident's interruption waits for the hold-back, not only a late one's: one moved past
// a quiet interval, and one whose parent recovered.
func TestDeferredIncidentsAreHeldBack(t *testing.T) {
	for _, tc := range []struct {
		name    string
		deferIt func(st *deadline.State, due time.Time)
	}{
		{"quiet", func(st *deadline.State, due time.Time) {
			st.Hold, st.InterruptedAt = deadline.HoldQuiet, due.UnixMilli()
		}},
		{"after its parent", func(st *deadline.State, due time.Time) {
			st.Next, st.Hold, st.InterruptedAt = 1, deadline.HoldAfterParent, st.Deadline
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := warnedFixture(t)
			t0 := f.Clock.Now()
			f.Refresh(t, deadline.Signal{Device: "s", Type: "sensor", Seen: t0})
			f.Clock.Advance(10 * time.Minute)
			res := f.ClaimAll(t, deadline.ClaimOptions{})
			require.Len(t, res.Claims, 1)
			c := res.Claims[0]
			due := f.Clock.Now().Add(time.Hour)
			st := c.State
			tc.deferIt(&st, due)
			_, err := f.Store.Settle(context.Background(), []deadline.Ack{reschedule(c, st, due)}, deadline.RecordsOf(res.Claims))
			require.NoError(t, err)

			f.Clock.Set(due)
			window := func(time.Duration) time.Time { return due.Add(-time.Minute) } // a blind window opened a minute ago
			res = f.ClaimAll(t, deadline.ClaimOptions{WatermarkFor: window})
			require.Len(t, res.Claims, 1)
			require.True(t, res.Claims[0].HeldBack, "its interruption is past what the hold-back allows")

			f.Clock.Advance(time.Minute) // the lease ran out; the window closed
			res = f.ClaimAll(t, deadline.ClaimOptions{WatermarkFor: func(time.Duration) time.Time { return f.Clock.Now() }})
			require.Len(t, res.Claims, 1)
			require.False(t, res.Claims[0].HeldBack)
		})
	}
}
