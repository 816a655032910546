package alertmanager

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// A late device is an alert of its own, severity=warning from its warning on; its interruption resolves
// it and fires the usual alert, its recovery resolves it.
func TestLateIsAWarningUntilInterruptedOrRecovered(t *testing.T) {
	f := newFixture(t, Options{ResendEvery: time.Minute})
	f.run()
	seen := t0.Add(-20 * time.Second)
	warnAt, due := seen.Add(20*time.Second), seen.Add(30*time.Second)
	f.out.Observe([]event.Event{
		event.New(event.Late, "gw-1", "gateway", warnAt, seen, t0, 0),
		event.New(event.Late, "gw-2", "gateway", warnAt, seen, t0, 0),
	})
	f.await("two warnings", func() bool { return len(f.am.active(t0)) == 2 })
	w := f.am.active(t0)["gw-1"]
	require.Equal(t, map[string]string{"alertname": "DeviceSilent", "device_id": "gw-1", "device_type": "gateway", "team": "iot",
		"severity": "warning"}, w.Labels)
	require.Equal(t, warnAt, w.StartsAt)
	require.Contains(t, w.Annotations["summary"], "is late")

	f.clock.Set(due)
	f.out.Observe([]event.Event{
		event.New(event.Interrupted, "gw-1", "gateway", due, seen, due, 0),
		event.New(event.Recovered, "gw-2", "gateway", warnAt, seen, due, 0),
	})
	f.await("gw-1 critical only, gw-2 cleared", func() bool {
		a := f.am.activeFor(due, "gw-1")
		return len(a) == 1 && a[0].Labels["severity"] == "" && len(f.am.activeFor(due, "gw-2")) == 0
	})
	require.Equal(t, due, f.am.activeFor(due, "gw-1")[0].StartsAt)
	for _, d := range []string{"gw-1", "gw-2"} {
		r, ok := f.am.find(map[string]string{"device_id": d, "severity": "warning"})
		require.True(t, ok, d)
		require.Equal(t, due, r.EndsAt, "%s: its warning resolved", d)
	}
}

// The re-sync reads a late incident from Redis and posts it as the warning it fired as.
func TestResyncPostsALateIncidentAsAWarning(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	st := newStoreFixture(t, rdb)
	st.openWith(t, "gw-late", deadline.State{Hold: deadline.HoldLate})
	st.open(t, "gw-down")
	f := newFixture(t, Options{Store: st.store, Slots: func() []int { return testenv.AllSlots(4) }})
	f.run()
	f.await("both posted", func() bool { return len(f.am.active(t0)) == 2 })
	a := f.am.active(t0)
	require.Equal(t, "warning", a["gw-late"].Labels["severity"])
	require.Equal(t, st.deadline, a["gw-late"].StartsAt)
	require.NotContains(t, a["gw-down"].Labels, "severity")
}
