package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/slotlayout"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// TestChaosRedisRestart crashes redis-server (AOF, appendfsync always) while signals flow and deadlines
// pass, and starts it again: signals that could not be stored stay unacknowledged and land afterwards,
// claims resume, every silent device is reported and no keeper is. "quick" restarts Redis as soon as
// heartbeatd noticed; "long" keeps it down for three timeouts, so keepers' deadlines pass while their
// signals cannot be stored and only the hold-back stands between them and a false interruption. A
// Redis that kept its data is not reported as one that lost it.
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
	lost, found, err := s.hb.Metric("heartbeatd_redis_data_lost_total")
	require.NoError(t, err)
	require.True(t, found)
	require.Zero(t, lost, "Redis came back with its data: no loss to report")
}

// TestChaosRedisClusterFailover kills the Redis Cluster master that holds the slot layout and the
// silences (every replica's heartbeat reads it) while signals flow and deadlines pass, and its replica
// takes over. Signals that could not be stored land afterwards, every silent device is reported, no keeper
// is, and a failover to a replica in sync is not reported as lost data.
func TestChaosRedisClusterFailover(t *testing.T) {
	cluster := testenv.StartRedisCluster(t, testenv.RedisClusterOptions{Replicas: 1, NodeTimeout: time.Second})
	s := startScenario(t, daemonOptions{redisCluster: cluster})
	s.keepers(2)
	sent := paced(s.p, s.silent, timeout)
	s.firstInterruption()
	killed := time.Now()
	cluster.KillMasterOf(t, slotlayout.LayoutKey(""))
	tookOver := time.Since(killed)
	waitReady(t, s.hb)
	t.Logf("the replica took over %.1fs after the master was killed; heartbeatd was ready again after %.1fs",
		tookOver.Seconds(), time.Since(killed).Seconds())
	require.NoError(t, <-sent)
	s.finish("redis_cluster_failover", "redis", 30*time.Second)
	lost, found, err := s.hb.Metric("heartbeatd_redis_data_lost_total")
	require.NoError(t, err)
	require.True(t, found)
	require.Zero(t, lost, "the replica that took over had the data: no loss to report")
}

// TestChaosRedisDataLost loses Redis's data while the fleet signals: "standalone" restarts Redis without
// its files (run without persistence, or its files lost); "cluster_master" empties the one Redis Cluster
// master that holds the silences while the layout's master keeps its data (the key prefix "test" puts
// them apart), as a master restarted without persistence comes back. heartbeatd must say so
// (heartbeatd_redis_data_lost_total, a /readyz note), report every device that falls silent afterwards
// and none that keeps signalling, keep a silence set before the loss, and a gateway that falls silent
// afterwards must be one interruption with its children suppressed: the links it remembered having
// written are written again, not ten minutes later.
func TestChaosRedisDataLost(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		s := startScenario(t, daemonOptions{})
		redisDataLost(s, "redis_data_lost", func() {
			s.redis.Kill(t)
			require.NoError(t, os.RemoveAll(filepath.Join(s.redis.Dir(), "appendonlydir")))
			s.redis.Start(t)
		})
	})
	t.Run("cluster_master", func(t *testing.T) {
		cluster := testenv.StartRedisCluster(t)
		s := startScenario(t, daemonOptions{redisCluster: cluster, keyPrefix: "test"})
		redisDataLost(s, "redis_cluster_master_lost", func() {
			// "test:silences" is internal/silence's hash under the prefix "test" (docs/concepts.md).
			testenv.LoseDataOf(t, cluster.Client(t), "test:silences", slotlayout.LayoutKey("test"))
		})
	})
}

// redisDataLost is one case of TestChaosRedisDataLost: lose takes Redis's data away.
func redisDataLost(s *scenario, name string, lose func()) {
	t := s.t
	s.keepers(2)
	gateway, children := "gw-lost", ids("child-lost", 20)
	family := s.publisher("family")
	withParent := func(string) []byte { return []byte(`{"parent":"` + gateway + `"}`) }
	stopFamily := repeatUntilStopped(timeout/5, func() {
		// A round the broker refused is sent again at the next.
		_ = family.signal([]string{gateway}, nil)
		_ = family.signal(children, withParent)
	})
	t.Cleanup(stopFamily)
	linked := func() bool {
		for _, c := range children {
			if parentOf(s.hb, c) != gateway {
				return false
			}
		}
		return true
	}
	require.True(t, poll(30*time.Second, linked), "the children's links were never written")
	// A device with its own timeout, three times its type's, signals its type every one and a half of
	// its type's timeout until the test ends: it is reported falsely if the loss takes its own timeout
	// with it. (An untyped signal would keep it anyway: it is timed by the type the replica remembers.)
	own := "own-lost"
	req, err := http.NewRequest(http.MethodPut, s.hb.HTTP+"/v1/devices/"+own, strings.NewReader(`{"timeout":"`+(3*timeout).String()+`"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	ownSignals := s.publisher("own")
	typed := func(string) []byte { return []byte(`{"type":"default"}`) }
	t.Cleanup(repeatUntilStopped(3*timeout/2, func() { _ = ownSignals.signal([]string{own}, typed) }))
	// A silence set before the loss still holds after it: this silent device is never interrupted.
	silenced := s.silent[0]
	resp, err = http.Post(s.hb.HTTP+"/v1/silences", "application/json",
		strings.NewReader(`{"device_id":"`+silenced+`","for":"1h"}`))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	lose()
	require.True(t, poll(30*time.Second, func() bool { n, _, _ := s.hb.Metric("heartbeatd_redis_data_lost_total"); return n == 1 }),
		"the loss was not counted\n%s", s.hb.LogTail())
	waitReady(t, s.hb)
	_, ready, err := readyz(s.hb)
	require.NoError(t, err)
	require.Contains(t, fmt.Sprint(ready["notes"]), "Redis lost heartbeatd's data")
	require.True(t, poll(30*time.Second, linked), "the children's links were not written again after the loss\n%s", s.hb.LogTail())
	stopFamily()

	require.NoError(t, <-paced(s.p, s.silent, timeout))
	s.silent = s.silent[1:]
	expected := append(s.settle(name, 30*time.Second), gateway)
	s.events.await(t, event.Suppressed, children, 30*time.Second)
	r := s.events.tallyInterrupted(name, s.n+2+len(children), expected) // + the gateway and own-lost
	report(t, r.plus(s.events.tally(event.Suppressed, "", 0, children)), func() string { return explainLost(s.hb, r.lostIDs) }, s.hb.LogTail)
}

// parentOf is the parent GET /v1/devices/{id} names, "" when none or unknown.
func parentOf(hb *testenv.Heartbeatd, id string) string {
	code, body, err := hb.Get("/v1/devices/" + id)
	var v struct {
		Parent string `json:"parent"`
	}
	if err != nil || code != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil {
		return ""
	}
	return v.Parent
}
