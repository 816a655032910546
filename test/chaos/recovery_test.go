package chaos

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// heartbeatdUser is the Redis ACL user heartbeatd logs in as in TestChaosRecoveryProbeLost.
const heartbeatdUser = "heartbeatd"

// notAlarms are glob patterns matching every key but a slot's alarms set (…:alarms): an ACL cannot deny
// a pattern, so they spell out "does not end in alarms" one letter at a time.
var notAlarms = []string{"*[^s]", "*[^m]s", "*[^r]ms", "*[^a]rms", "*[^l]arms", "*[^a]larms"}

// TestChaosRecoveryProbeLost loses the recovery probe of dormant incidents (interrupted, no repeats
// pending). A signal of an interrupted device is written in two round trips: its deadline (ZADD into the
// deadlines set), then the probe that makes its incident due so the scanner reports `recovered`. Here
// the second fails every time: heartbeatd's Redis user may not write the alarms sets, so the deadline
// lands and the probe is refused. Then:
//   - "retry": the user gets its rights back while heartbeatd goes on retrying the batch; the retry must
//     probe although its deadline write finds the device already there (deadline.Store.RefreshRetry).
//     The dormant sweep is set to an hour, so it cannot stand in.
//   - "crash": heartbeatd is SIGKILLed before that and started again; nothing it remembers says a probe
//     is owed, so the dormant sweep (detection.sweep_every, 2s here) must find the incident whose device
//     is back.
//
// Without the retry's probe and the sweep, each of these recoveries would be lost for good (a retried
// plain write adds nothing, so it probes nothing). The line counts each silent device's interruption
// and recovery, and the barrier's interruptions.
func TestChaosRecoveryProbeLost(t *testing.T) {
	t.Run("retry", func(t *testing.T) { recoveryProbeLost(t, "retry", time.Hour) })
	t.Run("crash", func(t *testing.T) { recoveryProbeLost(t, "crash", 2*time.Second) })
}

// recoveryProbeLost is one case of TestChaosRecoveryProbeLost.
func recoveryProbeLost(t *testing.T, name string, sweep time.Duration) {
	// The recovering signals name type "back" (timeout 1m): typed signals take the two round trips, and
	// one held through the fault is not late by the time it is written (a late signal reports nothing).
	s := startScenario(t, daemonOptions{redisUser: heartbeatdUser, sweepEvery: sweep, types: map[string]time.Duration{"back": time.Minute}})
	s.keepers(10)
	require.NoError(t, s.p.signal(s.silent, nil))
	s.events.awaitReported(t, s.silent, scaled(s.n, 30*time.Second))
	require.Equal(t, len(s.silent), s.events.reported(s.silent), "the silent devices were not all interrupted\n%s", s.hb.LogTail())

	s.grantRedis(heartbeatdUser, notAlarms...)
	require.NoError(t, s.p.signal(s.silent, func(string) []byte { return []byte(`{"type":"back"}`) }))
	// The batches in flight write their deadlines and are refused their probes; the chain holds the
	// later ones back until those are through.
	rdb := s.redis.Client(t)
	held := 0
	require.True(t, poll(scaled(s.n, 30*time.Second), func() bool {
		held = inDeadlines(rdb, s.silent)
		return held > 0 && containsAll(s.hb.Log(), "deadline refresh failed", "NOPERM")
	}), "no deadline written with its probe refused (%d written)\n%s", held, s.hb.LogTail())
	t.Logf("%d of %d recovering devices' deadlines written while their probes are refused", held, len(s.silent))
	require.Zero(t, s.events.count(event.Recovered, s.silent), "recoveries reported while every probe is refused")

	within := scaled(s.n, 30*time.Second)
	if name == "crash" {
		s.hb.Kill(t)
		s.grantRedis(heartbeatdUser)
		s.hb.Start(t)
		waitReady(t, s.hb)
		within += sweep
	} else {
		s.grantRedis(heartbeatdUser)
	}
	s.events.await(t, event.Recovered, s.silent, within)
	expected := s.settle("probe-"+name, 30*time.Second)
	r := s.events.tally(event.Recovered, "recovery_probe_lost_"+name, s.n, s.silent).
		plus(s.events.tallyInterrupted("", s.n, expected))
	report(t, r, s.hb.LogTail)
}

// inDeadlines counts the devices of ids that have a deadline in Redis.
func inDeadlines(rdb *redis.Client, ids []string) int {
	ctx := context.Background()
	keys := deadline.NewKeyspace("")
	pipe := rdb.Pipeline()
	cmds := make([]*redis.FloatCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.ZScore(ctx, keys.Deadlines(deadline.Slot(id, slots)), id)
	}
	_, _ = pipe.Exec(ctx) // a device without a deadline is redis.Nil in its command
	n := 0
	for _, c := range cmds {
		if c.Err() == nil {
			n++
		}
	}
	return n
}

// containsAll reports whether s contains every one of subs.
func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
