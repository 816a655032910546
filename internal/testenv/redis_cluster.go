package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisClusterOptions configures StartRedisCluster.
type RedisClusterOptions struct {
	// Masters is the number of master nodes (default 3, the fewest redis-cli --cluster create accepts).
	// There are no replicas.
	Masters int
}

// RedisCluster is a Redis Cluster of local redis-server processes, each on its own client and bus port
// and in its own directory, with the 16384 hash slots spread over the masters by redis-cli.
type RedisCluster struct {
	Addrs []string // "127.0.0.1:port" of every master

	dir   string
	nodes []*clusterNode
}

type clusterNode struct {
	srv           *server
	port, busPort int
	addr          string
}

// StartRedisCluster starts opts.Masters cluster-enabled redis-servers on free loopback ports, joins them
// with `redis-cli --cluster create … --cluster-replicas 0 --cluster-yes`, and waits until every node
// reports cluster_state:ok. tb.Cleanup kills the nodes. A missing redis-server or redis-cli skips the
// test, or fails it with CI=true (see Need).
//
// Starting a cluster takes about a second; suites that run every test on it share one through
// RedisBackends instead.
func StartRedisCluster(tb testing.TB, opts ...RedisClusterOptions) *RedisCluster {
	tb.Helper()
	var o RedisClusterOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	bins := clusterBinaries(tb)
	c, err := startRedisCluster(o, bins, tb.TempDir())
	// Registered after tb.TempDir's cleanup, so the nodes stop before their directories are removed.
	if c != nil {
		tb.Cleanup(c.stop)
	}
	if err != nil {
		tb.Fatalf("%v", err)
	}
	return c
}

type clusterBins struct{ server, cli string }

func clusterBinaries(tb testing.TB) clusterBins {
	tb.Helper()
	return clusterBins{server: lookPath(tb, "redis-server"), cli: lookPath(tb, "redis-cli")}
}

// startRedisCluster does the work of StartRedisCluster without a test, so a cluster can outlive one
// (see RedisBackends). On error the returned cluster, if not nil, has nodes to stop.
func startRedisCluster(opts RedisClusterOptions, bins clusterBins, dir string) (*RedisCluster, error) {
	n := opts.Masters
	if n == 0 {
		n = 3
	}
	if n < 3 {
		return nil, fmt.Errorf("testenv: a redis cluster needs at least 3 masters, not %d", n)
	}
	c := &RedisCluster{dir: dir}
	taken := map[int]bool{}
	for i := range n {
		node := &clusterNode{srv: &server{name: fmt.Sprintf("redis-server (cluster node %d)", i), path: bins.server}}
		node.srv.dir = filepath.Join(dir, "node"+strconv.Itoa(i))
		if err := os.MkdirAll(node.srv.dir, 0o755); err != nil {
			return c, fmt.Errorf("testenv: redis cluster: %w", err)
		}
		node.srv.logPath = filepath.Join(node.srv.dir, "redis.log")
		c.nodes = append(c.nodes, node)
		var err error
		for range 5 {
			// Two distinct ports that nothing else of this cluster holds: Redis' default bus port
			// (port+10000) may be taken or past 65535, so it is chosen here too (cluster-port, Redis ≥ 7).
			if node.port, err = distinctFreePort(taken); err != nil {
				break
			}
			if node.busPort, err = distinctFreePort(taken); err != nil {
				break
			}
			node.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(node.port))
			if err = node.srv.launch(node.args(), func() error { return pingAddr(node.addr) }); !errors.Is(err, errAddrInUse) {
				break
			}
		}
		if err != nil {
			return c, err
		}
		c.Addrs = append(c.Addrs, node.addr)
	}
	if err := c.create(bins.cli); err != nil {
		return c, err
	}
	if err := c.awaitOK(); err != nil {
		return c, err
	}
	return c, nil
}

func distinctFreePort(taken map[int]bool) (int, error) {
	for range 20 {
		p, err := freePort()
		if err != nil {
			return 0, err
		}
		if !taken[p] {
			taken[p] = true
			return p, nil
		}
	}
	return 0, errors.New("testenv: no distinct free port")
}

func (n *clusterNode) args() []string {
	return []string{
		"--port", strconv.Itoa(n.port),
		"--cluster-port", strconv.Itoa(n.busPort),
		"--bind", "127.0.0.1",
		"--dir", n.srv.dir,
		"--daemonize", "no",
		"--logfile", "",
		"--save", "",
		"--appendonly", "no",
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf", // in --dir
		"--cluster-node-timeout", "5000",
		"--enable-debug-command", "local",
	}
}

// create assigns the hash slots with redis-cli, which also waits until the nodes have met.
func (c *RedisCluster) create(cli string) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("testenv: redis-cli --cluster create: %w\n%s\n%s", err, out, c.LogTail())
	}
	return nil
}

// awaitOK polls CLUSTER INFO on every node until each reports cluster_state:ok and knows every master:
// only then do all nodes route every slot the same way.
func (c *RedisCluster) awaitOK() error {
	deadline := time.Now().Add(startTimeout)
	var last error
	for _, addr := range c.Addrs {
		for {
			if last = clusterOK(addr, len(c.Addrs)); last == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("testenv: redis cluster not ok within %v: %w\n%s", startTimeout, last, c.LogTail())
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

// pingAddr answers nil once the server at addr replies +PONG.
func pingAddr(addr string) error {
	return (&Redis{Addr: addr}).ping()
}

// Client returns a go-redis cluster client, closed by tb.Cleanup.
func (c *RedisCluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Flush empties every master (FLUSHALL) and forgets their scripts (SCRIPT FLUSH), so the cluster looks
// like a freshly started one.
func (c *RedisCluster) Flush(tb testing.TB) {
	tb.Helper()
	for _, addr := range c.Addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := rdb.FlushAll(ctx).Err()
		if err == nil {
			err = rdb.ScriptFlush(ctx).Err()
		}
		cancel()
		_ = rdb.Close()
		if err != nil {
			tb.Fatalf("testenv: flush redis cluster node %s: %v", addr, err)
		}
	}
}

// PIDs are the nodes' process ids (0 for a stopped node).
func (c *RedisCluster) PIDs() []int {
	var pids []int
	for _, n := range c.nodes {
		pids = append(pids, n.srv.pid())
	}
	return pids
}

// LogTail is the end of every node's log, for failure messages.
func (c *RedisCluster) LogTail() string {
	var b strings.Builder
	for _, n := range c.nodes {
		b.WriteString(logTail(n.srv.logPath))
		b.WriteByte('\n')
	}
	return b.String()
}

// stop kills every node: the data is thrown away with the directory.
func (c *RedisCluster) stop() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.srv.stop(syscall.SIGKILL)
		}()
	}
	wg.Wait()
}
