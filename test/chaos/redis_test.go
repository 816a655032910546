package chaos

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestChaosRedisRestart crashes redis-server (AOF, appendfsync always) while signals flow and deadlines
// pass, and starts it again: signals that could not be stored stay unacknowledged and land afterwards,
// claims resume, every silent device is reported and no keeper is. "quick" restarts Redis as soon as
// heartbeatd noticed; "long" keeps it down for three timeouts, so keepers' deadlines pass while their
// signals cannot be stored and only the hold-back stands between them and a false interruption.
func TestChaosRedisRestart(t *testing.T) {
	t.Run("quick", func(t *testing.T) { redisRestart(t, "quick", 0) })
	t.Run("long", func(t *testing.T) { redisRestart(t, "long", 3*timeout) })
}

// redisRestart is one case of TestChaosRedisRestart: Redis stays down for down at least.
func redisRestart(t *testing.T, name string, down time.Duration) {
	s := startScenario(t, daemonOptions{})
	s.keepers(2)

	sent := paced(s.p, s.silent, timeout)
	s.firstInterruption()
	s.redis.Kill(t)
	killed := time.Now()
	// heartbeatd noticed: it is not ready without Redis.
	require.True(t, poll(30*time.Second, func() bool {
		code, _, _ := s.hb.Get("/readyz")
		return code != http.StatusOK
	}), "readyz stayed 200 with Redis down\n%s", s.hb.LogTail())
	time.Sleep(time.Until(killed.Add(down))) // the outage's length is the fault itself
	s.redis.Start(t)
	require.NoError(t, <-sent)
	waitReady(t, s.hb)
	s.finish("redis_restart_"+name, "redis", 30*time.Second)
}
