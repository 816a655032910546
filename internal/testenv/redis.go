package testenv

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisOptions configures StartRedis.
type RedisOptions struct {
	// AOF turns on the append-only file with appendfsync always, so every acknowledged write survives
	// Stop, and Kill too. Without it the server keeps nothing across a restart (RDB saving is off).
	AOF bool
	// MaxMemory is Redis' maxmemory ("20mb"); "" means no limit. The policy stays noeviction, so a full
	// server answers writes with OOM errors instead of dropping keys.
	MaxMemory string
}

// Redis is a redis-server process on its own port and directory. Stop, Kill, Start, PID, Dir and LogTail
// control the process.
type Redis struct {
	Addr string // "127.0.0.1:port"

	opts RedisOptions
	port int
	*server
}

// LaunchRedis is StartRedis without a test (see the package comment for dir).
func LaunchRedis(ctx context.Context, dir string, opts RedisOptions) (*Redis, error) {
	srv, err := newServer("redis-server", dir, "redis.log")
	if err != nil {
		return nil, err
	}
	r := &Redis{opts: opts, server: srv}
	r.probe = r.ping
	return r, r.firstLaunch(ctx, func() error {
		if r.port, err = freePort(); err != nil {
			return err
		}
		r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port))
		r.args = r.arguments()
		return nil
	})
}

func (r *Redis) arguments() []string {
	args := []string{
		"--port", strconv.Itoa(r.port),
		"--bind", "127.0.0.1",
		"--dir", r.dir,
		"--daemonize", "no",
		"--logfile", "", // stdout, which goes to redis.log
		"--save", "", // no RDB snapshots: no forks in tests, and AOF alone decides what survives
		// DEBUG SLEEP and friends let tests make the server stall on purpose.
		"--enable-debug-command", "local",
	}
	if r.opts.AOF {
		// A restart replays the file: rewritten from 8 MB on, it stays a few seconds' load even after
		// a long soak's millions of writes, where Redis's 64 MB default took tens of seconds to replay.
		args = append(args, "--appendonly", "yes", "--appendfsync", "always", "--auto-aof-rewrite-min-size", "8mb")
	} else {
		args = append(args, "--appendonly", "no")
	}
	if r.opts.MaxMemory != "" {
		args = append(args, "--maxmemory", r.opts.MaxMemory, "--maxmemory-policy", "noeviction")
	}
	return args
}

// ping answers nil once the server replies +PONG; while it loads the AOF it replies -LOADING instead.
func (r *Redis) ping() error { return pingAddr(r.Addr) }

// pingAddr answers nil once the server at addr replies +PONG.
func pingAddr(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// Client returns a go-redis client for the server, closed by tb.Cleanup. It survives restarts of the
// server (go-redis reconnects).
func (r *Redis) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	return closedBy(tb, redis.NewClient(&redis.Options{Addr: r.Addr}))
}

// StartRedis starts redis-server on a free port with its own tb.TempDir and waits until it answers
// PING. tb.Cleanup kills it. Each call is a fresh, empty server: no flushing between tests is needed.
func StartRedis(tb testing.TB, opts ...RedisOptions) *Redis {
	tb.Helper()
	return start(tb, LaunchRedis, opts)
}

// CommandStat is one command's line of INFO commandstats: how often Redis ran it since its stats were
// reset, and for how long in all.
type CommandStat struct {
	Calls int64
	Usec  int64
}

// ReadCommandStats is rdb's INFO commandstats by command name, lower case as Redis writes it ("evalsha",
// "config|resetstat").
func ReadCommandStats(ctx context.Context, rdb redis.UniversalClient) (map[string]CommandStat, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("testenv: INFO commandstats: %w", err)
	}
	stats := map[string]CommandStat{}
	for line := range strings.Lines(info) {
		name, fields, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":")
		if !ok {
			continue
		}
		var s CommandStat
		for field := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(field, "=")
			switch k {
			case "calls":
				s.Calls, err = strconv.ParseInt(v, 10, 64)
			case "usec":
				s.Usec, err = strconv.ParseInt(v, 10, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("testenv: INFO commandstats line %q: %w", line, err)
			}
		}
		stats[name] = s
	}
	return stats, nil
}

// ServerCPU is the Redis server's used_cpu_user + used_cpu_sys: the CPU it spent, whatever else loads the
// host, so a benchmark's Redis cost per operation holds on a busy machine.
func ServerCPU(tb testing.TB, rdb redis.UniversalClient) time.Duration {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatalf("testenv: INFO cpu: %v", err)
	}
	var total float64
	for line := range strings.Lines(info) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatalf("testenv: INFO cpu line %q: %v", line, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// UsedMemory is Redis's used_memory (INFO memory): what the server really holds, its dictionaries and
// key expiries included, which MEMORY USAGE of the keys leaves out.
func UsedMemory(tb testing.TB, rdb redis.UniversalClient) int64 {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		tb.Fatalf("INFO memory: %v", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				tb.Fatalf("INFO memory: used_memory %q: %v", v, err)
			}
			return n
		}
	}
	tb.Fatal("INFO memory: no used_memory")
	return 0
}

// CommandStats is ReadCommandStats for a test.
func CommandStats(tb testing.TB, rdb redis.UniversalClient) map[string]CommandStat {
	tb.Helper()
	return must(tb, func() (map[string]CommandStat, error) { return ReadCommandStats(context.Background(), rdb) })
}
