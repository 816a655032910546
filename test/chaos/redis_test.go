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
	for _, tc := range []struct {
		name string
		down time.Duration
	}{{"quick", 0}, {"long", 3 * timeout}} {
		t.Run(tc.name, func(t *testing.T) {
			n := fleetSize(t)
			f := startFleet(t, fleetOptions{})
			hb := f.startDaemon(daemonOptions{})
			p := f.publisher("devices")
			silent := ids("silent", n)
			f.keep(ids("keeper", max(n/2, 10)))

			sent := p.paced(silent, timeout)
			f.firstInterruption(hb)
			f.redis.Kill(t)
			killed := time.Now()
			// heartbeatd noticed: it is not ready without Redis.
			require.True(t, poll(30*time.Second, func() bool {
				code, _, _ := hb.Get("/readyz")
				return code != http.StatusOK
			}), "readyz stayed 200 with Redis down\n%s", hb.LogTail())
			time.Sleep(time.Until(killed.Add(tc.down))) // the outage's length is the fault itself
			f.redis.Start(t)
			require.NoError(t, <-sent)
			waitReady(t, hb)

			f.events.awaitReported(t, silent, scaled(n, 30*time.Second))
			b := f.barrier(p, "redis", scaled(n, 30*time.Second))
			r := f.events.tallyInterrupted("redis_restart_"+tc.name, n, concat(silent, b))
			report(t, r, hb.LogTail)
		})
	}
}
