package chaos

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fullFor is how long TestChaosRedisFull keeps Redis full: three timeouts, so keepers' deadlines pass.
const fullFor = 3 * timeout

// TestChaosRedisFull makes Redis refuse every write (maxmemory far below what it uses, noeviction) while
// devices signal: heartbeatd must say so in its log, stop being ready, and acknowledge nothing it did
// not store; signals held meanwhile are stored once memory is freed, and the keepers, whose deadlines
// could not move while Redis was full, are not reported. The devices that signal while Redis is full
// name type "held", whose timeout outlasts the outage: a held signal whose deadline passed before it
// could be written proves nothing about now and is dropped as late (docs/signals.md).
func TestChaosRedisFull(t *testing.T) {
	s := startScenario(t, daemonOptions{types: map[string]time.Duration{"held": fullFor + 10*time.Second}})
	n, hb, full := s.n, s.hb, s.silent // the devices that signal while Redis is full
	rdb := s.redis.Client(t)
	ctx := context.Background()
	s.keepers(10)

	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", "1").Err())
	fullSince := time.Now()
	require.NoError(t, s.p.signal(full, func(string) []byte { return []byte(`{"type":"held"}`) }))

	var ready string
	require.True(t, poll(30*time.Second, func() bool {
		code, body, _ := hb.Get("/readyz")
		ready = body
		return code != http.StatusOK && strings.Contains(body, "refusing deadline writes")
	}), "readyz did not report Redis refusing writes: %s", ready)
	t.Logf("readyz while Redis is full: %s", ready)
	require.True(t, poll(30*time.Second, func() bool { return strings.Contains(hb.Log(), "OOM") }),
		"no OOM error in the log\n%s", hb.LogTail())
	// Nothing was stored while Redis was full; anything heartbeatd acknowledged meanwhile is gone for good.
	stored := 0
	for _, id := range full {
		if device(t, hb, id) != "" {
			stored++
		}
	}
	require.Zero(t, stored, "devices stored while Redis refused writes")

	// Full for three timeouts at least: keepers' deadlines pass while their signals cannot be stored.
	time.Sleep(time.Until(fullSince.Add(fullFor)))
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", "0").Err())
	waitReady(t, hb)
	r := tally{scenario: "redis_full", devices: n, expected: n}
	missing := func() []string {
		var out []string
		for _, id := range full {
			if device(t, hb, id) == "" {
				out = append(out, id)
			}
		}
		return out
	}
	var lost []string
	poll(scaled(n, 30*time.Second), func() bool { lost = missing(); return len(lost) == 0 })
	r.got = n - len(lost)
	r.lost = len(lost)
	for _, id := range lost[:min(len(lost), 10)] {
		r.detail = append(r.detail, "signal acknowledged but never stored: "+id)
	}
	// Keepers: the full devices go silent from here and are reported once their timeout passed; the barrier
	// proves that detection has gone past the OOM window; every other interruption is false.
	bar := s.barrier(s.p, "full", scaled(n, 30*time.Second))
	s.events.awaitReported(t, full, scaled(n, 30*time.Second))
	ev := s.events.tallyInterrupted("redis_full", n, concat(full, bar))
	r.falses, r.dup = ev.falses, ev.dup
	r.detail = append(r.detail, ev.detail...)
	report(t, r, hb.LogTail)
}
