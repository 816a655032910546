package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// RedisBackend is one kind of Redis deployment a suite runs against.
type RedisBackend struct {
	Name string // "standalone" or "cluster": the subtest name
	// Client returns a client on an empty Redis of this kind, valid until tb ends. Call it once per test
	// and share the client: every call starts from an empty Redis.
	//
	// standalone: a fresh redis-server of its own (StartRedis). cluster: the package's shared 3-master
	// cluster, flushed, and held by tb (and its subtests) until tb ends, so tests on it never overlap —
	// or a cluster of tb's own when the package's TestMain does not go through Main or Shared.
	Client func(tb testing.TB) redis.UniversalClient
}

// RedisBackendsEnv narrows RedisBackends to a comma-separated list of names, e.g.
// HB_TEST_REDIS=cluster to iterate on a cluster failure. Unset means all.
const RedisBackendsEnv = "HB_TEST_REDIS"

// RedisBackends lists the Redis deployments heartbeatd supports, for suites that run once per backend:
//
//	for _, b := range testenv.RedisBackends(t) {
//		t.Run(b.Name, func(t *testing.T) { rdb := b.Client(t); … })
//	}
func RedisBackends(tb testing.TB) []RedisBackend {
	tb.Helper()
	all := []RedisBackend{
		{Name: "standalone", Client: func(tb testing.TB) redis.UniversalClient {
			tb.Helper()
			return StartRedis(tb).Client(tb)
		}},
		{Name: "cluster", Client: func(tb testing.TB) redis.UniversalClient {
			tb.Helper()
			return sharedCluster(tb).Client(tb)
		}},
	}
	want := os.Getenv(RedisBackendsEnv)
	if want == "" {
		return all
	}
	var out []RedisBackend
	for _, name := range strings.Split(want, ",") {
		found := false
		for _, b := range all {
			if b.Name == strings.TrimSpace(name) {
				out, found = append(out, b), true
			}
		}
		if !found {
			tb.Fatalf("testenv: %s=%q: unknown backend %q (standalone, cluster)", RedisBackendsEnv, want, name)
		}
	}
	return out
}

// EachBackend runs test once per Redis deployment (RedisBackends) as a subtest of that name, each time on
// an empty Redis: what heartbeatd stores must behave the same on a standalone server and on a cluster,
// where a batch splits into one script call per slot. tb is a *testing.T or a *testing.B. A suite with a
// fixture of its own wraps it in one line (internal/alarm/alarm_test.go eachFixture).
func EachBackend[TB interface {
	testing.TB
	Run(name string, f func(TB)) bool
}](tb TB, test func(tb TB, rdb redis.UniversalClient)) {
	tb.Helper()
	for _, b := range RedisBackends(tb) {
		tb.Run(b.Name, func(tb TB) { test(tb, b.Client(tb)) })
	}
}

// Main runs the package's tests and benchmarks, stops the servers they shared, and exits:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) { os.Exit(Shared(m).Run()) }

// Shared wraps m so that Run stops the servers the package's tests shared once they all ended; for a
// TestMain that hands m to something else, e.g. goleak.VerifyTestMain(testenv.Shared(m)).
func Shared(m *testing.M) interface{ Run() int } { return sharedMain{m} }

type sharedMain struct{ m *testing.M }

func (s sharedMain) Run() int {
	shared.enabled.Store(true)
	defer shared.close()
	return s.m.Run()
}

// shared is the cluster every test of the package uses, started by the first that needs it.
var shared sharedServers

type sharedServers struct {
	enabled atomic.Bool // Run of Shared is in progress

	startOnce sync.Once
	cluster   *RedisCluster
	err       error

	mu     sync.Mutex
	cond   *sync.Cond
	holder string // name of the test using the cluster now, "" when free
}

// sharedCluster returns the package's cluster, flushed, held by tb until it ends.
func sharedCluster(tb testing.TB) *RedisCluster {
	tb.Helper()
	if !shared.enabled.Load() {
		// Nothing would stop a shared cluster: give the test one of its own.
		return StartRedisCluster(tb)
	}
	shared.startOnce.Do(func() {
		shared.cond = sync.NewCond(&shared.mu)
		shared.cluster, shared.err = launchRedisCluster(context.Background(), "", RedisClusterOptions{})
	})
	if shared.err != nil {
		check(tb, fmt.Errorf("testenv: shared redis cluster: %w", shared.err))
	}
	acquireShared(tb)
	shared.cluster.Flush(tb)
	return shared.cluster
}

// acquireShared waits until no other test holds the shared cluster and makes tb its holder until tb
// ends. tb's subtests, and tb itself again, pass straight through.
func acquireShared(tb testing.TB) {
	name := tb.Name()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for shared.holder != "" && name != shared.holder && !strings.HasPrefix(name, shared.holder+"/") {
		shared.cond.Wait()
	}
	if shared.holder != "" {
		return
	}
	shared.holder = name
	tb.Cleanup(func() {
		shared.mu.Lock()
		shared.holder = ""
		shared.mu.Unlock()
		shared.cond.Broadcast()
	})
}

// close stops the shared cluster and removes its directory.
func (s *sharedServers) close() {
	s.enabled.Store(false)
	if s.cluster != nil {
		s.cluster.Close()
	}
	removeHeartbeatdBuild()
}

// LoseData empties every master rdb reaches (FLUSHALL), as a Redis restarted without persistence comes
// back: for tests of what heartbeatd does when Redis lost its data.
func LoseData(tb testing.TB, rdb redis.UniversalClient) {
	tb.Helper()
	ctx := context.Background()
	var err error
	if c, ok := rdb.(*redis.ClusterClient); ok {
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.FlushAll(ctx).Err() })
	} else {
		err = rdb.FlushAll(ctx).Err()
	}
	if err != nil {
		tb.Fatalf("testenv: flush redis: %v", err)
	}
}

// LoseDataOf empties the master that holds key (FLUSHALL), as one Redis Cluster master restarted without
// persistence comes back while the others keep their data; on a standalone Redis it is LoseData. On a
// cluster, each of keep must live on another master (the test's premise), or the test fails first.
func LoseDataOf(tb testing.TB, rdb redis.UniversalClient, key string, keep ...string) {
	tb.Helper()
	c, ok := rdb.(*redis.ClusterClient)
	if !ok {
		LoseData(tb, rdb)
		return
	}
	ctx := context.Background()
	master := func(key string) *redis.Client {
		m, err := c.MasterForKey(ctx, key)
		if err != nil {
			tb.Fatalf("testenv: the redis master of %q: %v", key, err)
		}
		return m
	}
	lost := master(key)
	for _, k := range keep {
		if master(k).Options().Addr == lost.Options().Addr {
			tb.Fatalf("testenv: %q and %q live on one master; the test needs them apart", key, k)
		}
	}
	if err := lost.FlushAll(ctx).Err(); err != nil {
		tb.Fatalf("testenv: flush the redis master of %q: %v", key, err)
	}
}
