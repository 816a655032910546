package testenv

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisClusterOptions configures StartRedisCluster.
type RedisClusterOptions struct {
	// Masters is the number of master nodes (default 3, the fewest redis-cli --cluster create accepts).
	Masters int
	// Replicas is the number of replicas of each master (default 0), for tests of a failover.
	Replicas int
	// NodeTimeout is cluster-node-timeout: how long a master may be unreachable before its replica
	// takes over (default 5s).
	NodeTimeout time.Duration
}

// RedisCluster is a Redis Cluster of local redis-server processes, each on its own client and bus port
// and in its own directory, with the 16384 hash slots spread over the masters by redis-cli.
type RedisCluster struct {
	Addrs []string // "127.0.0.1:port" of every node, masters and replicas

	dir         string
	ownDir      bool // made by the launcher, removed by Close
	nodes       []*clusterNode
	replicas    int
	nodeTimeout time.Duration
}

type clusterNode struct {
	*server
	port, busPort int
	addr          string
}

// launchRedisCluster is StartRedisCluster without a test (see the package comment for dir); the nodes
// live in subdirectories.
func launchRedisCluster(ctx context.Context, dir string, opts RedisClusterOptions) (*RedisCluster, error) {
	n := cmp.Or(opts.Masters, 3)
	if n < 3 {
		return nil, fmt.Errorf("testenv: a redis cluster needs at least 3 masters, not %d", n)
	}
	srvPath, err := LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	cli, err := LookPath("redis-cli")
	if err != nil {
		return nil, err
	}
	c := &RedisCluster{replicas: opts.Replicas, nodeTimeout: cmp.Or(opts.NodeTimeout, 5*time.Second)}
	if c.dir, c.ownDir, err = serverDir(dir, "redis-cluster"); err != nil {
		return nil, err
	}
	if err := c.launch(ctx, n*(1+opts.Replicas), srvPath, cli); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *RedisCluster) launch(ctx context.Context, n int, srvPath, cli string) error {
	taken := map[int]bool{}
	for i := range n {
		dir := filepath.Join(c.dir, "node"+strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("testenv: redis cluster: %w", err)
		}
		srv, err := newServerAt(fmt.Sprintf("redis-server (cluster node %d)", i), srvPath, dir, "redis.log")
		if err != nil {
			return err
		}
		node := &clusterNode{server: srv}
		node.probe = func() error { return pingAddr(node.addr) }
		c.nodes = append(c.nodes, node)
		// Two distinct ports that nothing else of this cluster holds: Redis' default bus port
		// (port+10000) may be taken or past 65535, so it is chosen here too (cluster-port, Redis ≥ 7).
		err = node.firstLaunch(ctx, func() error {
			var err error
			if node.port, err = distinctFreePort(taken); err != nil {
				return err
			}
			if node.busPort, err = distinctFreePort(taken); err != nil {
				return err
			}
			node.addr = "127.0.0.1:" + strconv.Itoa(node.port)
			node.args = node.arguments(c.nodeTimeout)
			return nil
		})
		if err != nil {
			return err
		}
		c.Addrs = append(c.Addrs, node.addr)
	}
	if err := c.create(ctx, cli); err != nil {
		return err
	}
	return c.awaitOK(ctx)
}

func (n *clusterNode) arguments(nodeTimeout time.Duration) []string {
	return []string{
		"--port", strconv.Itoa(n.port),
		"--cluster-port", strconv.Itoa(n.busPort),
		"--bind", "127.0.0.1",
		"--dir", n.dir,
		"--daemonize", "no",
		"--logfile", "",
		"--save", "",
		"--appendonly", "no",
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf", // in --dir
		"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
		"--enable-debug-command", "local",
	}
}

// create assigns the hash slots with redis-cli, which also waits until the nodes have met.
func (c *RedisCluster) create(ctx context.Context, cli string) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(c.replicas), "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("testenv: redis-cli --cluster create: %w\n%s\n%s", err, out, c.logTail())
	}
	return nil
}

// awaitOK polls CLUSTER INFO on every node until each reports cluster_state:ok and knows every node, and
// every replica is in sync with its master: only then do all nodes route every slot the same way, and a
// master's writes reach its replica.
func (c *RedisCluster) awaitOK(ctx context.Context) error {
	deadline := time.Now().Add(startTimeout)
	var last error
	for _, addr := range c.Addrs {
		for {
			if last = clusterOK(addr, len(c.Addrs)); last == nil && c.replicas > 0 {
				last = replicaInSync(addr)
			}
			if last == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("testenv: redis cluster not ok within %v: %w\n%s", startTimeout, last, c.logTail())
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			time.Sleep(pollInterval)
		}
	}
	return nil
}

func clusterOK(addr string, masters int) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := rdb.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return fmt.Errorf("%s: cluster_state is not ok", addr)
	}
	if !strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(masters)+"\r") {
		return fmt.Errorf("%s: does not know all %d nodes yet", addr, masters)
	}
	return nil
}

// replicaInSync returns nil for a master, and for a replica whose link to its master is up.
func replicaInSync(addr string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if strings.Contains(info, "role:slave") && !strings.Contains(info, "master_link_status:up") {
		return fmt.Errorf("%s: replica not in sync with its master yet", addr)
	}
	return nil
}

// KillMasterOf kills (SIGKILL) the master that holds key and waits until one of its replicas has taken
// over: a failover. The cluster needs Replicas; it is left with the killed node down.
func (c *RedisCluster) KillMasterOf(tb testing.TB, key string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout+2*c.nodeTimeout)
	defer cancel()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	defer rdb.Close()
	master, err := rdb.MasterForKey(ctx, key)
	if err != nil {
		tb.Fatalf("testenv: the master of %q: %v", key, err)
	}
	victim := master.Options().Addr
	for _, n := range c.nodes {
		if n.addr == victim {
			n.Kill(tb)
		}
	}
	for {
		// A new client each time: one reads the slots' owners once, from any node that answers.
		after := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, MaxRetries: -1})
		m, err := after.MasterForKey(ctx, key)
		moved := err == nil && m.Options().Addr != victim && m.Ping(ctx).Err() == nil
		_ = after.Close()
		if moved {
			return
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("testenv: no replica took over from %s: %v\n%s", victim, ctx.Err(), c.logTail())
		case <-time.After(pollInterval):
		}
	}
}

// Client returns a go-redis cluster client, closed by tb.Cleanup.
func (c *RedisCluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	return closedBy(tb, redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs}))
}

// Flush empties every master (FLUSHALL) and forgets their scripts (SCRIPT FLUSH), so the cluster looks
// like a freshly started one.
func (c *RedisCluster) Flush(tb testing.TB) {
	tb.Helper()
	if err := c.flush(); err != nil {
		tb.Fatalf("%v", err)
	}
}

func (c *RedisCluster) flush() error {
	for _, addr := range c.Addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := rdb.FlushAll(ctx).Err()
		if err == nil {
			err = rdb.ScriptFlush(ctx).Err()
		}
		if err != nil && strings.HasPrefix(err.Error(), "READONLY") {
			err = nil // a replica: its master's flush empties it
		}
		cancel()
		_ = rdb.Close()
		if err != nil {
			return fmt.Errorf("testenv: flush redis cluster node %s: %w", addr, err)
		}
	}
	return nil
}

// PIDs are the nodes' process ids (0 for a stopped node).
func (c *RedisCluster) PIDs() []int {
	var pids []int
	for _, n := range c.nodes {
		pids = append(pids, n.PID())
	}
	return pids
}

// logTail is the end of every node's log, for failure messages.
func (c *RedisCluster) logTail() string {
	var b strings.Builder
	for _, n := range c.nodes {
		b.WriteString(n.LogTail())
		b.WriteByte('\n')
	}
	return b.String()
}

// Close kills every node (the data is thrown away) and removes the directory when its launcher made it.
func (c *RedisCluster) Close() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Go(n.Close)
	}
	wg.Wait()
	if c.ownDir {
		_ = os.RemoveAll(c.dir)
	}
}

// StartRedisCluster starts opts.Masters × (1 + opts.Replicas) cluster-enabled redis-servers on free
// loopback ports, joins them with `redis-cli --cluster create … --cluster-replicas <Replicas>
// --cluster-yes`, and waits until every node
// reports cluster_state:ok. tb.Cleanup kills the nodes. A missing redis-server or redis-cli skips the
// test, or fails it with CI=true (see Need).
//
// Starting a cluster takes about a second; suites that run every test on it share one through
// RedisBackends instead.
func StartRedisCluster(tb testing.TB, opts ...RedisClusterOptions) *RedisCluster {
	tb.Helper()
	return start(tb, launchRedisCluster, opts)
}
