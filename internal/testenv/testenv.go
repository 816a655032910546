// Package testenv starts the servers heartbeatd's tests run against: real redis-server and mosquitto
// processes on free loopback ports (each in its own tb.TempDir), and an in-process kfake Kafka cluster.
// Every server is stopped by tb.Cleanup; the processes by their PID.
//
// A missing server binary skips the test on a developer machine and fails it with CI=true (see Need), so
// CI can never go green by skipping. A server that is installed but does not start always fails the test,
// with the tail of its log in the message.
//
// The methods take a testing.TB and call its Fatalf: call them from the test's goroutine.
package testenv

import (
	"bytes"
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
	port, err := freePort()
	if err != nil {
		tb.Fatalf("testenv: find a free port: %v", err)
	}
	return port
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// lookPath finds a server binary or reports it missing through Need (which does not return). Debian
// installs mosquitto in /usr/sbin, which is not on an ordinary user's PATH, so the sbin directories are
// tried too.
func lookPath(tb testing.TB, bin string) string {
	tb.Helper()
	path, err := exec.LookPath(bin)
	if err == nil {
		return path
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/sbin"} {
		if p, err2 := exec.LookPath(filepath.Join(dir, bin)); err2 == nil {
			return p
		}
	}
	Need(tb, bin, err)
	return ""
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
	cmd.SysProcAttr = sysProcAttr()
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

// waitReady polls probe until it succeeds, the process exits, or startTimeout passes.
func (p *process) waitReady(probe func() error) error {
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

// server is what Redis and Mosquitto share: a binary restarted on the same ports and directory.
type server struct {
	name    string // for messages: "redis-server", "mosquitto"
	path    string
	dir     string
	logPath string
	env     []string // nil: the test process's own environment

	mu   sync.Mutex
	proc *process
}

// launch starts the binary and waits until probe answers. A start that lost its port to another process
// returns an error wrapping errAddrInUse, so first starts can pick another port.
func (s *server) launch(args []string, probe func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.proc.exited() {
		return fmt.Errorf("testenv: %s is already running (pid %d)", s.name, s.proc.cmd.Process.Pid)
	}
	offset := fileSize(s.logPath)
	p, err := startProcess(s.path, args, s.env, s.dir, s.logPath)
	if err != nil {
		return fmt.Errorf("testenv: start %s: %w", s.name, err)
	}
	s.proc = p
	if err := p.waitReady(probe); err != nil {
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

func (s *server) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// firstStart starts a server on fresh ports, retrying when another process took a port first. configure
// picks the ports (and writes any config) and returns the arguments and the readiness probe.
func firstStart(tb testing.TB, s *server, configure func() ([]string, func() error, error)) {
	tb.Helper()
	var err error
	for range 5 {
		var args []string
		var probe func() error
		if args, probe, err = configure(); err != nil {
			break
		}
		if err = s.launch(args, probe); !errors.Is(err, errAddrInUse) {
			break
		}
	}
	if err != nil {
		tb.Fatalf("%v", err)
	}
	// Registered after tb.TempDir's own cleanup, so it runs first: the server stops before its
	// directory is removed. SIGKILL because the directory is thrown away anyway.
	tb.Cleanup(func() { s.stop(syscall.SIGKILL) })
}
