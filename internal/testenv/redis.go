package testenv

import (
	"bufio"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"syscall"
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

// Redis is a redis-server process of one test, on its own port and directory.
type Redis struct {
	Addr string // "127.0.0.1:port"

	opts RedisOptions
	port int
	srv  *server
}

// StartRedis starts redis-server on a free port with its own tb.TempDir and waits until it answers
// PING. tb.Cleanup kills it. Each call is a fresh, empty server: no flushing between tests is needed.
func StartRedis(tb testing.TB, opts ...RedisOptions) *Redis {
	tb.Helper()
	r := &Redis{srv: &server{name: "redis-server", path: lookPath(tb, "redis-server")}}
	if len(opts) > 0 {
		r.opts = opts[0]
	}
	r.srv.dir = tb.TempDir()
	r.srv.logPath = filepath.Join(r.srv.dir, "redis.log")
	firstStart(tb, r.srv, func() ([]string, func() error, error) {
		port, err := freePort()
		if err != nil {
			return nil, nil, fmt.Errorf("testenv: find a free port: %w", err)
		}
		r.port = port
		r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		return r.args(), r.ping, nil
	})
	return r
}

func (r *Redis) args() []string {
	args := []string{
		"--port", strconv.Itoa(r.port),
		"--bind", "127.0.0.1",
		"--dir", r.srv.dir,
		"--daemonize", "no",
		"--logfile", "", // stdout, which goes to redis.log
		"--save", "", // no RDB snapshots: no forks in tests, and AOF alone decides what survives
		// DEBUG SLEEP and friends let tests make the server stall on purpose.
		"--enable-debug-command", "local",
	}
	if r.opts.AOF {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	if r.opts.MaxMemory != "" {
		args = append(args, "--maxmemory", r.opts.MaxMemory, "--maxmemory-policy", "noeviction")
	}
	return args
}

// ping answers nil once the server replies +PONG; while it loads the AOF it replies -LOADING instead.
func (r *Redis) ping() error {
	conn, err := net.DialTimeout("tcp", r.Addr, time.Second)
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
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Stop sends SIGTERM and waits for the exit (a kill after 10s). The directory stays: with AOF the data
// survives into the next Start. Stopping a stopped server does nothing.
func (r *Redis) Stop(tb testing.TB) {
	tb.Helper()
	r.srv.stop(syscall.SIGTERM)
}

// Kill sends SIGKILL and waits for the exit: a crash. With AOF (appendfsync always) every acknowledged
// write survives it.
func (r *Redis) Kill(tb testing.TB) {
	tb.Helper()
	r.srv.stop(syscall.SIGKILL)
}

// Start restarts a stopped server on the same port and directory and waits until PING answers (after the
// AOF is loaded). Starting a running server fails the test.
func (r *Redis) Start(tb testing.TB) {
	tb.Helper()
	if err := r.srv.launch(r.args(), r.ping); err != nil {
		tb.Fatalf("%v", err)
	}
}

// PID is the server's process id, 0 while it is stopped.
func (r *Redis) PID() int { return r.srv.pid() }

// Dir is the server's working directory (AOF, log).
func (r *Redis) Dir() string { return r.srv.dir }

// LogTail is the end of the server's log, for failure messages of the caller's own.
func (r *Redis) LogTail() string { return logTail(r.srv.logPath) }
