// Package testenv starts the servers heartbeatd's tests and benchmarks run against: real redis-server,
// mosquitto and heartbeatd processes on free loopback ports, each in its own directory, and an in-process
// kfake Kafka cluster.
//
// Every server but the Redis Cluster has a launcher that returns an error (LaunchRedis, LaunchMosquitto, LaunchKafka,
// LaunchHeartbeatd), for plain programs such as cmd/hbbench: the server lives in the
// directory it is given, or in a temporary one of its own when that is "", and the caller stops it with
// Close. The Start functions wrap them for tests: the server lives in tb.TempDir and is stopped by
// tb.Cleanup; the processes by their PID.
//
// In a test, a missing server binary skips the test on a developer machine and fails it with CI=true (see
// Need), so CI can never go green by skipping. A server that is installed but does not start always fails
// the test, with the tail of its log in the message.
//
// Beside the servers: the small fixtures the Redis-side suites share to drive a deadline store (Clock,
// TypeTimeouts, AllSlots; the fixture itself is internal/testenv/deadlinetest's, which may import
// internal/deadline), the test's event sink (EventLog), a metric reader (MetricValue) and a test TLS
// authority (GenerateTLS).
//
// The methods that take a testing.TB call its Fatalf: call them from the test's goroutine.
package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds how long a server may take to answer after it is started. Generous because the
// machines running the tests are small and shared; readiness is polled, so a fast start is not slowed.
const startTimeout = 20 * time.Second

// stopTimeout bounds a graceful stop (SIGTERM) before the process is killed.
const stopTimeout = 10 * time.Second

// pollInterval is how often readiness is probed.
const pollInterval = 10 * time.Millisecond

// Need reports a missing server: with CI=true it calls tb.Fatalf, otherwise tb.Skipf, with the reason.
func Need(tb testing.TB, what string, err error) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf("testenv: %s is required with CI=true: %v", what, err)
	}
	tb.Skipf("testenv: %s not available, skipping (CI=true makes this a failure): %v", what, err)
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on right now. Another process may take
// it before the caller binds it; the Start functions retry on a fresh port when that happens.
func FreePort(tb testing.TB) int {
	tb.Helper()
	return must(tb, freePort)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testenv: find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// distinctFreePort is a free port that taken does not hold yet, and adds it to taken.
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

// MissingError is a launcher's error when a server binary is not installed: a test skips on it, or fails
// with CI=true (see Need).
type MissingError struct {
	Bin string
	Err error // exec.LookPath's
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("testenv: %s not found on PATH nor in the sbin directories: %v", e.Bin, e.Err)
}

func (e *MissingError) Unwrap() error { return e.Err }

// LookPath finds a server binary, or returns a *MissingError. Debian installs mosquitto in /usr/sbin,
// which is not on an ordinary user's PATH, so the sbin directories are tried too.
func LookPath(bin string) (string, error) {
	path, err := exec.LookPath(bin)
	if err == nil {
		return path, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/sbin"} {
		if p, err2 := exec.LookPath(filepath.Join(dir, bin)); err2 == nil {
			return p, nil
		}
	}
	return "", &MissingError{Bin: bin, Err: err}
}

// check ends tb on a launcher's error: a missing binary through Need, anything else with Fatalf.
func check(tb testing.TB, err error) {
	tb.Helper()
	if missing := (*MissingError)(nil); errors.As(err, &missing) {
		Need(tb, missing.Bin, missing.Err)
	}
	if err != nil {
		tb.Fatalf("%v", err)
	}
}

// must is f's value, or the end of tb on its error (see check).
func must[T any](tb testing.TB, f func() (T, error)) T {
	tb.Helper()
	v, err := f()
	check(tb, err)
	return v
}

// start is every Start function: launch's server in tb.TempDir, closed by tb.Cleanup, and a failed launch
// ending tb (see check).
func start[O any, S interface{ Close() }](tb testing.TB, launch func(ctx context.Context, dir string, o O) (S, error), opts []O) S {
	tb.Helper()
	var o O
	if len(opts) > 0 {
		o = opts[0]
	}
	s := must(tb, func() (S, error) { return launch(context.Background(), tb.TempDir(), o) })
	// Registered after tb.TempDir's own cleanup, so it runs first: the server stops before its
	// directory is removed.
	tb.Cleanup(s.Close)
	return s
}

// closedBy registers c's Close with tb.Cleanup and returns c.
func closedBy[C interface{ Close() error }](tb testing.TB, c C) C {
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// serverDir is dir, or a new temporary directory that the server owns (removes at Close) when dir is "".
func serverDir(dir, name string) (string, bool, error) {
	if dir != "" {
		return dir, false, nil
	}
	dir, err := os.MkdirTemp("", "testenv-"+name+"-")
	if err != nil {
		return "", false, fmt.Errorf("testenv: %s directory: %w", name, err)
	}
	return dir, true, nil
}

// errAddrInUse marks a start that failed because another process took the port first.
var errAddrInUse = errors.New("address already in use")

// process is one run of a server binary: its stdout and stderr go to logPath (appended, so the log of
// every restart stays readable), and done closes when it has exited and been reaped.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // exit status; read only after done is closed
}

func startProcess(path string, args, env []string, dir, logPath string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// The child gets its own copy of the descriptor: no copying goroutine, and ours closes right away.
	defer logf.Close()
	fmt.Fprintf(logf, "--- testenv: %s %s (%s)\n", path, strings.Join(args, " "), time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Env = env // nil: the test process's own environment
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = SysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends sig and waits for the exit; after timeout it kills. It returns whether the process exited
// on sig alone.
func (p *process) stop(sig syscall.Signal, timeout time.Duration) bool {
	if p.exited() {
		return true
	}
	_ = p.cmd.Process.Signal(sig)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		return false
	}
}

// waitReady polls probe until it succeeds, the process exits, ctx ends or startTimeout passes.
func (p *process) waitReady(ctx context.Context, probe func() error) error {
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last error
	for {
		if last = probe(); last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited before answering (%v); last probe: %w", p.err, last)
		case <-deadline.C:
			return fmt.Errorf("no answer within %v: %w", startTimeout, last)
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// logTail is the end of a server log, for failure messages.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	const maxBytes, maxLines = 4096, 30
	if len(b) > maxBytes {
		b = b[len(b)-maxBytes:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return "--- " + path + " (tail)\n" + strings.Join(lines, "\n")
}

// addrInUse reports whether the log written after offset says the port was taken.
func addrInUse(path string, offset int64) bool {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < offset {
		return false
	}
	s := strings.ToLower(string(b[offset:]))
	return strings.Contains(s, "address already in use")
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// server is what the process-backed servers share: a binary restarted with the same arguments on the
// same ports and directory. Its exported methods are promoted to Redis, Mosquitto and Heartbeatd.
type server struct {
	name    string // for messages: "redis-server", "mosquitto"
	path    string
	dir     string
	ownDir  bool // made by the launcher, removed by Close
	logPath string
	env     []string // nil: the test process's own environment
	args    []string
	probe   func() error // readiness

	mu   sync.Mutex
	proc *process
}

// newServer finds bin and the server's directory (see serverDir); its output goes to logName there.
func newServer(bin, dir, logName string) (*server, error) {
	path, err := LookPath(bin)
	if err != nil {
		return nil, err
	}
	return newServerAt(bin, path, dir, logName)
}

func newServerAt(name, path, dir, logName string) (*server, error) {
	dir, own, err := serverDir(dir, name)
	if err != nil {
		return nil, err
	}
	return &server{name: name, path: path, dir: dir, ownDir: own, logPath: filepath.Join(dir, logName)}, nil
}

// launch starts the binary and waits until probe answers. A start that lost its port to another process
// returns an error wrapping errAddrInUse, so first starts can pick another port.
func (s *server) launch(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.proc.exited() {
		return fmt.Errorf("testenv: %s is already running (pid %d)", s.name, s.proc.cmd.Process.Pid)
	}
	offset := fileSize(s.logPath)
	p, err := startProcess(s.path, s.args, s.env, s.dir, s.logPath)
	if err != nil {
		return fmt.Errorf("testenv: start %s: %w", s.name, err)
	}
	s.proc = p
	if err := p.waitReady(ctx, s.probe); err != nil {
		p.stop(syscall.SIGKILL, stopTimeout)
		if addrInUse(s.logPath, offset) {
			return fmt.Errorf("testenv: start %s: %w: %v", s.name, errAddrInUse, err)
		}
		return fmt.Errorf("testenv: start %s: %w\n%s", s.name, err, logTail(s.logPath))
	}
	return nil
}

func (s *server) stop(sig syscall.Signal) {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p != nil {
		p.stop(sig, stopTimeout)
	}
}

// firstLaunch starts a server on fresh ports, retrying when another process took a port first. configure
// picks the ports (and writes any config) and sets the arguments and the readiness probe. On error the
// server is stopped and its directory removed when it owns it.
func (s *server) firstLaunch(ctx context.Context, configure func() error) error {
	var err error
	for range 5 {
		if err = configure(); err != nil {
			break
		}
		if err = s.launch(ctx); !errors.Is(err, errAddrInUse) {
			break
		}
	}
	if err != nil {
		s.Close()
	}
	return err
}

// Stop sends SIGTERM and waits for the exit (a kill after 10s). The directory stays, and with it what
// the server saved. Stopping a stopped server does nothing.
func (s *server) Stop(tb testing.TB) {
	tb.Helper()
	s.stop(syscall.SIGTERM)
}

// Kill sends SIGKILL and waits for the exit: a crash, nothing more is saved.
func (s *server) Kill(tb testing.TB) {
	tb.Helper()
	s.stop(syscall.SIGKILL)
}

// Start restarts a stopped server on the same ports and directory and waits until it answers. Starting a
// running server fails the test.
func (s *server) Start(tb testing.TB) {
	tb.Helper()
	if err := s.launch(context.Background()); err != nil {
		tb.Fatalf("%v", err)
	}
}

// Close kills the server (its data is thrown away) and removes its directory when its launcher made it.
func (s *server) Close() {
	s.stop(syscall.SIGKILL)
	if s.ownDir {
		_ = os.RemoveAll(s.dir)
	}
}

// PID is the server's process id, 0 while it is stopped.
func (s *server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Dir is the server's working directory (configuration, data, log).
func (s *server) Dir() string { return s.dir }

// LogTail is the end of the server's log (every run appended), for failure messages of the caller's own.
func (s *server) LogTail() string { return logTail(s.logPath) }
