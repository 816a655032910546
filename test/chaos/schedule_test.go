package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// TestChaosKillAtQuietEnd: the silent devices' deadlines fall inside a one-minute quiet interval aligned
// to the wall clock, so all of them come due at once at its end + timeout; heartbeatd is SIGKILLed while
// that burst is being published and started again. Every silent device is reported, none before the
// interval's end + timeout, and no keeper is.
func TestChaosKillAtQuietEnd(t *testing.T) {
	now := time.Now().UTC()
	start := now.Truncate(time.Minute)
	if start.Add(time.Minute).Sub(now) < 20*time.Second {
		start = start.Add(time.Minute)
		time.Sleep(time.Until(start)) // a wall-clock boundary: nothing to await but the clock
	}
	end := start.Add(time.Minute)
	f := startFleet(t)
	s := &scenario{fleet: f, n: fleetSize(t), silent: ids("silent", fleetSize(t))}
	defaultType := fmt.Sprintf("  default: {timeout: %s, repeat_every: 0s}\n", timeout)
	cfg := f.config(daemonOptions{})
	require.Contains(t, cfg, defaultType)
	endTime := end.Format("15:04")
	if endTime == "00:00" {
		endTime = "24:00"
	}
	cfg = strings.Replace(cfg, defaultType, fmt.Sprintf("  default: {timeout: %s, repeat_every: 0s, quiet: [blink]}\n", timeout), 1) +
		fmt.Sprintf("time_intervals: [{name: blink, time_intervals: [{times: [{start_time: %q, end_time: %q}]}]}]\n",
			start.Format("15:04"), endTime)
	s.hb = testenv.StartHeartbeatd(t, testenv.HeartbeatdOptions{Config: cfg})
	waitReady(t, s.hb)
	s.p = s.publisher("devices")
	s.keepers(10)
	require.Less(t, time.Now(), end.Add(-3*timeout), "the fleet took too long to start for this minute")

	require.NoError(t, s.p.signal(s.silent, nil)) // deadlines now + timeout: inside the minute
	// Nothing comes due before the interval's end, up to a minute away: a wall-clock boundary, nothing to
	// await but the clock; then the burst at its end + timeout.
	time.Sleep(time.Until(end))
	s.awaitQuarter()
	s.hb.Kill(t)
	s.hb.Start(t)
	r := s.events.tallyInterrupted("kill_at_quiet_end", s.n, s.settle("quietkill", 30*time.Second))
	due := end.Add(timeout)
	for _, id := range s.silent {
		if e, ok := s.events.firstOf(event.Interrupted, id); ok && e.At.Before(due) {
			r.falses++
			if len(r.detail) < 20 {
				r.detail = append(r.detail, fmt.Sprintf("%s reported at %s, inside the quiet interval (due %s)", id,
					e.At.Format(time.RFC3339Nano), due.Format(time.RFC3339Nano)))
			}
		}
	}
	report(t, r, func() string { return explainLost(s.hb, r.lostIDs) }, s.hb.LogTail)
}
