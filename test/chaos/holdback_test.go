package chaos

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// TestChaosHoldBackBound keeps one ingest source blind past detection.max_hold_back (5s here): the MQTT
// broker goes down for good while the keepers signal over Kafka ingest, which stays up. Hold-back holds
// detection for max_hold_back; then detection resumes degraded: every device that fell silent on MQTT
// before the outage is reported, each event whose deadline passed inside the blind window carrying
// "degraded": true (none is reported earlier, undegraded, and none is lost to the hold), /readyz says
// "degraded", and no keeper is reported. The barrier signals over Kafka too.
func TestChaosHoldBackBound(t *testing.T) {
	const maxHold = 5 * time.Second
	// A timeout long enough that the silent devices are stored before any of their deadlines passes,
	// so those deadlines pass inside the blind window.
	const silentFor = 5 * time.Second
	s := startScenario(t, daemonOptions{kafkaIngest: true, maxHoldBack: maxHold, timeout: silentFor})
	overKafka := s.kafkaSignaller()
	keepers := s.keepersVia(overKafka, 10)
	require.NoError(t, s.p.signal(s.silent, nil))
	awaitStats(t, s.hb, scaled(s.n, 30*time.Second), "signals stored", func(st stats) bool {
		return st.Devices.Online >= int64(len(s.silent)+len(keepers))
	})

	s.broker.Stop(t)
	blind := time.Now()
	s.p = overKafka
	r := s.events.tallyInterrupted("hold_back_bound", s.n, s.settle("hold", maxHold+30*time.Second))
	inWindow := 0
	for _, id := range s.silent {
		e, ok := s.events.firstOf(event.Interrupted, id)
		if !ok || e.Deadline.Before(blind) {
			continue
		}
		inWindow++
		if !e.Degraded {
			r.falses++
			if len(r.detail) < 20 {
				r.detail = append(r.detail, fmt.Sprintf("not degraded %s (deadline %s, raised %s)", e.ID,
					e.Deadline.Format(time.RFC3339Nano), e.At.Format(time.RFC3339Nano)))
			}
		}
	}
	report(t, r, s.hb.LogTail)
	require.Positive(t, inWindow, "no silent device's deadline passed inside the blind window")
	// MQTT is still down: /readyz names it and says detection runs degraded.
	code, checks, err := readyz(s.hb)
	require.NoError(t, err)
	t.Logf("/readyz while degraded: %d %v", code, checks)
	require.Equal(t, "degraded", checks["status"], "/readyz: %d %v", code, checks)
	require.Contains(t, checks["mqtt"], "disconnected", "/readyz: %d %v", code, checks)
	require.Contains(t, s.hb.Log(), "blind for longer than detection.max_hold_back")
}
