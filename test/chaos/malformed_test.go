package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// badPayloads are one of each kind of bad input a device can send on a valid topic; the i-th bad device
// sends badPayloads[i%len].
var badPayloads = []struct{ reason, payload string }{
	{"malformed_json", `{"type":`},
	{"bad_ts", `{"ts":"yesterday"}`},
	{"invalid_device_id", `{"device_id":"` + strings.Repeat("x", 300) + `"}`},
	{"invalid_type", `{"type":5}`},
	{"malformed_json", `{"ts":1,}`},
}

// TestChaosMalformed mixes N bad messages into N valid ones: every valid signal is stored, every bad one
// is dead-lettered with its reason (and not stored), none twice.
func TestChaosMalformed(t *testing.T) {
	// A long timeout: the valid devices must still be online when they are checked.
	s := startScenario(t, daemonOptions{timeout: 10 * time.Minute})
	n, hb, f := s.n, s.hb, s.fleet
	good, bad := ids("ok", n), ids("bad", n)
	index := make(map[string]int, n)
	mixed := make([]string, 0, 2*n)
	for i := range n {
		index[bad[i]] = i
		mixed = append(mixed, good[i], bad[i])
	}
	require.NoError(t, s.p.signal(mixed, func(id string) []byte {
		if i, ok := index[id]; ok {
			return []byte(badPayloads[i%len(badPayloads)].payload)
		}
		return nil
	}))

	topic := func(id string) string { return "devices/" + id + "/heartbeat" }
	lettered := func() int {
		f.events.mu.Lock()
		defer f.events.mu.Unlock()
		k := 0
		for _, id := range bad {
			if len(f.events.deadletters[topic(id)]) > 0 {
				k++
			}
		}
		return k
	}
	if !poll(scaled(n, 30*time.Second), func() bool { return lettered() == n }) {
		t.Logf("chaos: %d of %d dead letters arrived", lettered(), n)
	}
	// Await every valid signal stored; found ones are not asked again.
	stored := make(map[string]bool, n)
	storedAll := func() bool {
		for _, id := range good {
			if !stored[id] && device(t, hb, id) == "online" {
				stored[id] = true
			}
		}
		return len(stored) == n
	}
	poll(scaled(n, 30*time.Second), storedAll)
	r := tally{scenario: "malformed", devices: n, expected: 2 * n}
	validLost := 0
	for _, id := range good {
		if stored[id] {
			r.got++
			continue
		}
		validLost++
		if len(r.detail) < 10 {
			r.detail = append(r.detail, "valid signal not stored: "+id)
		}
	}
	for _, id := range bad {
		if device(t, hb, id) != "" {
			r.falses++
			r.detail = append(r.detail, "bad input stored: "+id)
		}
	}
	f.events.mu.Lock()
	for i, id := range bad {
		reasons := f.events.deadletters[topic(id)]
		if len(reasons) == 0 {
			if len(r.detail) < 20 {
				r.detail = append(r.detail, "not dead-lettered: "+id)
			}
			continue
		}
		r.got++
		r.dup += len(reasons) - 1
		if want := badPayloads[i%len(badPayloads)].reason; reasons[0] != want {
			r.falses++
			r.detail = append(r.detail, fmt.Sprintf("%s dead-lettered as %q, want %q", id, reasons[0], want))
		}
	}
	for _, id := range good {
		if len(f.events.deadletters[topic(id)]) > 0 {
			r.falses++
			r.detail = append(r.detail, "valid signal dead-lettered: "+id)
		}
	}
	f.events.mu.Unlock()
	r.lost = r.expected - r.got
	report(t, r, hb.LogTail)
}
