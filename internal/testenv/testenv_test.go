package testenv_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// Every server, client and goroutine testenv starts must be gone when the tests end, the shared cluster
// of RedisBackends too.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testenv.Shared(m))
}

// recordingTB stands in for a test to observe Fatalf and Skipf; both stop the goroutine as the real ones
// do. Everything else goes to the real test.
type recordingTB struct {
	testing.TB
	mu            sync.Mutex
	fatal, skip   string
	fatalf, skipf bool
}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.fatalf, r.fatal = true, fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recordingTB) Skipf(format string, args ...any) {
	r.mu.Lock()
	r.skipf, r.skip = true, fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

// run calls f with a recordingTB on its own goroutine, so Fatalf and Skipf can end it.
func run(t *testing.T, f func(tb testing.TB)) *recordingTB {
	r := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func TestNeed(t *testing.T) {
	missing := fmt.Errorf("exec: %q: executable file not found in $PATH", "redis-server")
	for _, tc := range []struct {
		name, ci string
		fatal    bool
	}{{"skip outside CI", "", false}, {"fail in CI", "true", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			r := run(t, func(tb testing.TB) { testenv.Need(tb, "redis-server", missing) })
			require.Equal(t, tc.fatal, r.fatalf)
			require.Equal(t, !tc.fatal, r.skipf)
			msg := r.skip
			if tc.fatal {
				msg = r.fatal
			}
			require.Contains(t, msg, "redis-server")
			require.Contains(t, msg, "executable file not found")
		})
	}
	t.Run("missing binary", func(t *testing.T) {
		t.Setenv("CI", "true")
		t.Setenv("PATH", t.TempDir())
		r := run(t, func(tb testing.TB) { testenv.StartRedis(tb) })
		require.True(t, r.fatalf)
		require.Contains(t, r.fatal, "redis-server")
	})
}

// The launchers serve programs without a test: errors are returned, a missing binary as a MissingError,
// and Close stops the server and removes the directory the launcher made.
func TestLaunchWithoutTest(t *testing.T) {
	ctx := context.Background()
	r, err := testenv.LaunchRedis(ctx, "", testenv.RedisOptions{})
	if missing := (*testenv.MissingError)(nil); errors.As(err, &missing) {
		testenv.Need(t, missing.Bin, missing.Err)
	}
	require.NoError(t, err)
	pid, dir := r.PID(), r.Dir()
	require.True(t, alive(pid))
	require.DirExists(t, dir)
	r.Close()
	require.False(t, alive(pid))
	require.NoDirExists(t, dir)

	t.Setenv("PATH", t.TempDir())
	_, err = testenv.LaunchRedis(ctx, "", testenv.RedisOptions{})
	var missing *testenv.MissingError
	require.ErrorAs(t, err, &missing)
	require.Equal(t, "redis-server", missing.Bin)
}

func TestFreePort(t *testing.T) {
	port := testenv.FreePort(t)
	require.Greater(t, port, 0)
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	require.NoError(t, err, "the port is free to bind")
	require.NoError(t, ln.Close())
}

func TestRedisRestartWithoutAOF(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	require.True(t, strings.HasPrefix(srv.Addr, "127.0.0.1:"), srv.Addr)
	rdb := srv.Client(t)
	require.NoError(t, rdb.Set(ctx, "k", "v", 0).Err())
	pid := srv.PID()
	require.Positive(t, pid)

	srv.Stop(t)
	require.Zero(t, srv.PID())
	_, err := net.DialTimeout("tcp", srv.Addr, time.Second)
	require.Error(t, err, "a stopped server does not listen")
	srv.Stop(t) // stopping twice is harmless

	srv.Start(t)
	require.Positive(t, srv.PID())
	require.NotEqual(t, pid, srv.PID())
	require.ErrorIs(t, rdb.Get(ctx, "k").Err(), redis.Nil, "without AOF nothing survives a restart")
}

func TestRedisAOFSurvivesStopAndKill(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t, testenv.RedisOptions{AOF: true})
	addr := srv.Addr
	rdb := srv.Client(t)
	require.NoError(t, rdb.Set(ctx, "stopped", "1", 0).Err())
	srv.Stop(t)
	srv.Start(t)
	require.Equal(t, addr, srv.Addr, "same port after a restart")
	require.Equal(t, "1", rdb.Get(ctx, "stopped").Val())

	// appendfsync always: what was acknowledged before a crash is there after it.
	for i := range 100 {
		require.NoError(t, rdb.ZAdd(ctx, "z", redis.Z{Score: float64(i), Member: i}).Err())
	}
	srv.Kill(t)
	require.Zero(t, srv.PID())
	srv.Start(t)
	require.Equal(t, "1", rdb.Get(ctx, "stopped").Val())
	require.EqualValues(t, 100, rdb.ZCard(ctx, "z").Val())
}

func TestRedisMaxMemory(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t, testenv.RedisOptions{MaxMemory: "2mb"})
	rdb := srv.Client(t)
	require.Equal(t, "2097152", rdb.ConfigGet(ctx, "maxmemory").Val()["maxmemory"])
	value := strings.Repeat("x", 64<<10)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		err = rdb.Set(ctx, "k"+strconv.Itoa(i), value, 0).Err()
	}
	require.ErrorContains(t, err, "OOM", "a full server refuses writes instead of evicting")
}

// CommandStats counts what a test ran since the stats were reset, subcommands under their own names.
func TestRedisCommandStats(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.StartRedis(t).Client(t)
	require.NoError(t, rdb.ConfigResetStat(ctx).Err())
	pipe := rdb.Pipeline()
	for i := range 1000 {
		pipe.Set(ctx, "k", i, 0)
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	stats := testenv.CommandStats(t, rdb)
	require.EqualValues(t, 1000, stats["set"].Calls)
	require.Positive(t, stats["set"].Usec, "a thousand SETs take some microseconds")
	require.EqualValues(t, 1, stats["config|resetstat"].Calls)
	require.Zero(t, stats["get"].Calls, "a command not run is not listed")
}

func TestRedisStartFailureShowsLog(t *testing.T) {
	r := run(t, func(tb testing.TB) { testenv.StartRedis(tb, testenv.RedisOptions{MaxMemory: "plenty"}) })
	require.True(t, r.fatalf)
	require.Contains(t, r.fatal, "redis.log (tail)")
	require.Contains(t, r.fatal, "maxmemory", "the server's own complaint is in the message")
}

func TestRedisStartWhileRunningFails(t *testing.T) {
	srv := testenv.StartRedis(t)
	r := run(t, func(tb testing.TB) { srv.Start(tb) })
	require.True(t, r.fatalf)
	require.Contains(t, r.fatal, "already running")
}

// alive reports whether a process with pid exists (the servers are reaped as they exit).
func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

func TestRedisCluster(t *testing.T) {
	ctx := context.Background()
	var pids []int
	t.Run("start", func(t *testing.T) {
		c := testenv.StartRedisCluster(t, testenv.RedisClusterOptions{})
		require.Len(t, c.Addrs, 3)
		pids = c.PIDs()
		for _, pid := range pids {
			require.True(t, alive(pid))
		}
		rdb := c.Client(t)
		for i := range 300 {
			require.NoError(t, rdb.Set(ctx, "k"+strconv.Itoa(i), i, 0).Err())
		}
		// Every master took a share of the keys: the slots are spread, not all on one node.
		for _, addr := range c.Addrs {
			node := redis.NewClient(&redis.Options{Addr: addr})
			n, err := node.DBSize(ctx).Result()
			_ = node.Close()
			require.NoError(t, err)
			require.Positive(t, n, "keys on %s", addr)
		}
		// A real cluster: a script over keys of two hash slots is refused; one hash tag works.
		script := redis.NewScript(`return redis.call('SET', KEYS[1], 1) and redis.call('SET', KEYS[2], 1)`)
		require.ErrorContains(t, script.Run(ctx, rdb, []string{"a", "b"}).Err(), "CROSSSLOT")
		require.NoError(t, script.Run(ctx, rdb, []string{"x:{1}:a", "x:{1}:b"}).Err())

		c.Flush(t)
		require.NoError(t, rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			if n := node.DBSize(ctx).Val(); n != 0 {
				return fmt.Errorf("%d keys left after Flush", n)
			}
			return nil
		}))
	})
	require.Len(t, pids, 3)
	for _, pid := range pids {
		require.False(t, alive(pid), "node %d stopped by the test's cleanup", pid)
	}
}

func TestRedisClusterNeedsRedisCli(t *testing.T) {
	server, err := testenv.LookPath("redis-server")
	if err != nil {
		testenv.Need(t, "redis-server", err)
	}
	bin := t.TempDir()
	require.NoError(t, os.Symlink(server, filepath.Join(bin, "redis-server")))
	t.Setenv("CI", "true")
	t.Setenv("PATH", bin)
	r := run(t, func(tb testing.TB) { testenv.StartRedisCluster(tb) })
	require.True(t, r.fatalf)
	require.Contains(t, r.fatal, "redis-cli")
}

// Each backend hands every test an empty Redis; the shared cluster is held by one test at a time, so
// parallel tests on it never see each other's keys.
func TestRedisBackends(t *testing.T) {
	ctx := context.Background()
	backends := testenv.RedisBackends(t)
	var names []string
	for _, b := range backends {
		names = append(names, b.Name)
	}
	require.Equal(t, []string{"standalone", "cluster"}, names)
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			for i := range 3 {
				t.Run("parallel-"+strconv.Itoa(i), func(t *testing.T) {
					t.Parallel()
					rdb := b.Client(t)
					_, isCluster := rdb.(*redis.ClusterClient)
					require.Equal(t, b.Name == "cluster", isCluster)
					for range 50 {
						require.NoError(t, rdb.Incr(ctx, "{n}:counter").Err())
						require.NoError(t, rdb.SAdd(ctx, "{n}:who", t.Name()).Err())
					}
					require.Equal(t, "50", rdb.Get(ctx, "{n}:counter").Val())
					require.Equal(t, []string{t.Name()}, rdb.SMembers(ctx, "{n}:who").Val(), "no other test's keys")
				})
			}
		})
	}

	t.Run("filter", func(t *testing.T) {
		t.Setenv(testenv.RedisBackendsEnv, "cluster")
		got := testenv.RedisBackends(t)
		require.Len(t, got, 1)
		require.Equal(t, "cluster", got[0].Name)
		t.Setenv(testenv.RedisBackendsEnv, "sentinel")
		r := run(t, func(tb testing.TB) { testenv.RedisBackends(tb) })
		require.True(t, r.fatalf)
		require.Contains(t, r.fatal, `unknown backend "sentinel"`)
	})
}

func TestGenerateTLS(t *testing.T) {
	files := testenv.GenerateTLS(t, "broker.test", "10.1.2.3")
	ca := x509.NewCertPool()
	require.True(t, ca.AppendCertsFromPEM(files.CAPEM))
	caFile, err := os.ReadFile(files.CAFile)
	require.NoError(t, err)
	require.Equal(t, files.CAPEM, caFile)

	parse := func(path string) *x509.Certificate {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		block, _ := pem.Decode(b)
		require.NotNil(t, block, path)
		c, err := x509.ParseCertificate(block.Bytes)
		require.NoError(t, err)
		return c
	}
	srv := parse(files.CertFile)
	for _, host := range []string{"127.0.0.1", "::1", "localhost", "broker.test", "10.1.2.3"} {
		_, err := srv.Verify(x509.VerifyOptions{Roots: ca, DNSName: host})
		require.NoError(t, err, host)
	}
	_, err = srv.Verify(x509.VerifyOptions{Roots: ca, DNSName: "elsewhere.test"})
	require.Error(t, err)
	cli := parse(files.ClientCertFile)
	_, err = cli.Verify(x509.VerifyOptions{Roots: ca, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)
	for _, pair := range [][2]string{{files.CertFile, files.KeyFile}, {files.ClientCertFile, files.ClientKeyFile}} {
		_, err := tls.LoadX509KeyPair(pair[0], pair[1])
		require.NoError(t, err, pair[0])
	}
}

func TestStoreFixtures(t *testing.T) {
	t0 := time.UnixMilli(1_763_800_000_000)
	c := testenv.NewClock(t0)
	require.Equal(t, t0, c.Now())
	c.Advance(time.Second)
	require.Equal(t, t0.Add(time.Second), c.Now())
	c.Set(t0)
	require.Equal(t, t0, c.Now())

	timeout := testenv.TypeTimeouts(map[string]time.Duration{"default": time.Minute, "gateway": time.Second})
	require.Equal(t, time.Second, timeout("gateway"))
	require.Equal(t, time.Minute, timeout("sensor"), "a type the table does not name gets the default")

	require.Equal(t, []int{0, 1, 2, 3}, testenv.AllSlots(4))
}
