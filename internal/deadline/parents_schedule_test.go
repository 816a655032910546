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

// A parent whose type has expected times is judged by its recorded last signal: its deadline (the next
// expected time + grace) minus its longest gap is no signal time, and a child would take a parent that
// signalled a minute ago for one silent for a year.
func TestScheduledParentIsJudgedByItsLastSignal(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	clock := testenv.NewClock(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC))
	newYear := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	expected := func(typ string, _ time.Time) (time.Time, bool) { return newYear, typ == "yearly" }
	timeout := func(typ string) time.Duration {
		if typ == "yearly" {
			return 366 * 24 * time.Hour // its longest gap
		}
		return time.Minute
	}
	store := deadlinetest.NewStore(t, rdb, deadline.Options{Slots: 4, Now: clock.Now, Timeout: timeout, Expected: expected},
		"default", "yearly")
	ctx := context.Background()
	signalled := clock.Now().Add(-time.Minute)
	require.NoError(t, store.Refresh(ctx, []deadline.Signal{{Device: "gw", Type: "yearly", Seen: signalled}}))
	parents, err := store.Parents(ctx, []string{"gw"})
	require.NoError(t, err)
	p := parents["gw"]
	require.True(t, p.Known)
	require.Equal(t, signalled.UnixMilli(), p.LastSignal.UnixMilli(), "the recorded signal, not deadline − longest gap")
	require.Equal(t, newYear.UnixMilli(), p.Deadline.UnixMilli())
}
