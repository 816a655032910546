package testenv

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The heartbeatd binary is built once per test process and shared: building is the slow part of a
// process-level test, and every test wants the same binary.
var heartbeatdBuild struct {
	once sync.Once
	dir  string // the temporary directory holding the binary; removed by removeHeartbeatdBuild
	path string
	err  error
}

// MainWithBinary is TestMain for packages whose tests run the real binary: it runs the tests, then removes
// the binary HeartbeatdBinary built (35 MB in a temporary directory per test process, which would pile
// up with every run).
func MainWithBinary(m *testing.M) {
	code := m.Run()
	removeHeartbeatdBuild()
	os.Exit(code)
}

// RemoveHeartbeatdBuild deletes the binary HeartbeatdBinary or LaunchHeartbeatd built, if they built one:
// a program that launched heartbeatd calls it before it exits, as MainWithBinary does for tests.
func RemoveHeartbeatdBuild() { removeHeartbeatdBuild() }

func removeHeartbeatdBuild() {
	if dir := heartbeatdBuild.dir; dir != "" {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: remove %s: %v\n", dir, err)
		}
	}
}

// HeartbeatdBinary builds ./cmd/heartbeatd (once per test process) and returns the binary's path.
// HB_HEARTBEATD_BIN names a prebuilt binary instead.
func HeartbeatdBinary(tb testing.TB) string {
	tb.Helper()
	return must(tb, heartbeatdBinary)
}

func heartbeatdBinary() (string, error) {
	if p := os.Getenv("HB_HEARTBEATD_BIN"); p != "" {
		return p, nil
	}
	b := &heartbeatdBuild
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "heartbeatd-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.dir = dir
		b.path, b.err = buildHeartbeatd(context.Background(), dir)
	})
	if b.err != nil {
		return "", fmt.Errorf("testenv: %w", b.err)
	}
	return b.path, nil
}

// buildHeartbeatd builds ./cmd/heartbeatd of the module the working directory is in into dir and returns
// the binary's path. It is what HeartbeatdBinary and hbbench share.
func buildHeartbeatd(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	path := filepath.Join(dir, "heartbeatd")
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", path, "./cmd/heartbeatd")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/heartbeatd: %w\n%s", err, out)
	}
	return path, nil
}

// moduleRoot finds the directory holding go.mod, upwards from the working directory (a package dir).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory (run from the repository)")
		}
		dir = parent
	}
}

// HeartbeatdOptions configure one heartbeatd process.
type HeartbeatdOptions struct {
	// Config is the YAML config file's content. http.listen is overridden with a free port through
	// HEARTBEATD_HTTP_LISTEN.
	Config string
	// Env adds HEARTBEATD_* (or any) variables, "KEY=value".
	Env []string
	// Binary is the heartbeatd binary to run; "" means HeartbeatdBinary's.
	Binary string
	// Notify runs `heartbeatd notify` (the notifier alone, its metrics on the free port) instead of
	// `heartbeatd run`.
	Notify bool
}

// Heartbeatd is the real heartbeatd binary run as a subprocess: `heartbeatd run -config <file>`. Stop,
// Kill and Start restart it on the same config and HTTP port; PID, Dir and LogTail are the process's.
type Heartbeatd struct {
	HTTP string // "http://127.0.0.1:port"

	*server
	addr    string
	cfgPath string
}

// LaunchHeartbeatd is StartHeartbeatd without a test (see the package comment for dir).
func LaunchHeartbeatd(ctx context.Context, dir string, opts HeartbeatdOptions) (*Heartbeatd, error) {
	bin := opts.Binary
	if bin == "" {
		var err error
		if bin, err = heartbeatdBinary(); err != nil {
			return nil, err
		}
	}
	srv, err := newServerAt("heartbeatd", bin, dir, "heartbeatd.log")
	if err != nil {
		return nil, err
	}
	h := &Heartbeatd{server: srv, cfgPath: filepath.Join(srv.dir, "heartbeatd.yaml")}
	h.probe = h.healthy
	if err := os.WriteFile(h.cfgPath, []byte(opts.Config), 0o600); err != nil {
		h.Close()
		return nil, fmt.Errorf("testenv: write heartbeatd config: %w", err)
	}
	return h, h.firstLaunch(ctx, func() error {
		port, err := freePort()
		if err != nil {
			return err
		}
		h.addr = "127.0.0.1:" + strconv.Itoa(port)
		h.HTTP = "http://" + h.addr
		h.args = []string{"run", "-config", h.cfgPath}
		if opts.Notify {
			h.args = []string{"notify", "-config", h.cfgPath, "-http", h.addr}
		}
		h.env = append(append(os.Environ(), opts.Env...), "HEARTBEATD_HTTP_LISTEN="+h.addr)
		return nil
	})
}

// healthy probes /healthz.
func (h *Heartbeatd) healthy() error { return h.answers("/healthz") }

// answers is nil once path answers 200.
func (h *Heartbeatd) answers(path string) error {
	status, body, err := h.get(path)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("%s answered %d %s", path, status, body)
	}
	return nil
}

// AwaitReady polls /readyz until it answers 200 (heartbeatd's sources are connected and Redis answers),
// ctx ends or within passes; the error has the last answer (LogTail has the rest).
func (h *Heartbeatd) AwaitReady(ctx context.Context, within time.Duration) error {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		last := h.answers("/readyz")
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("testenv: heartbeatd not ready within %v: %w", within, last)
		case <-tick.C:
		}
	}
}

func (h *Heartbeatd) get(path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.HTTP+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Get fetches path from heartbeatd's HTTP server: status and body, or an error when it did not answer.
func (h *Heartbeatd) Get(path string) (int, string, error) { return h.get(path) }

// Metric reads one sample from heartbeatd's /metrics: sample is the metric's name with its labels as
// the exposition writes them (`heartbeatd_slots_owned`, `heartbeatd_signals_total{result="applied",source="kafka"}`).
// found is false when /metrics answered without it.
func (h *Heartbeatd) Metric(sample string) (value float64, found bool, err error) {
	code, body, err := h.get("/metrics")
	if err != nil {
		return 0, false, err
	}
	if code != http.StatusOK {
		return 0, false, fmt.Errorf("testenv: /metrics answered %d", code)
	}
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), sample+" "); ok {
			value, err = strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, false, fmt.Errorf("testenv: /metrics %s: %w", sample, err)
			}
			return value, true, nil
		}
	}
	return 0, false, nil
}

// Signal sends sig (SIGHUP: reload) to the running process.
func (h *Heartbeatd) Signal(tb testing.TB, sig syscall.Signal) {
	tb.Helper()
	p := h.running()
	if p == nil || p.exited() {
		tb.Fatalf("testenv: heartbeatd is not running\n%s", h.LogTail())
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		tb.Fatalf("testenv: signal heartbeatd: %v", err)
	}
}

func (h *Heartbeatd) running() *process {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.proc
}

// Stop sends SIGTERM and waits for the exit (killing it after the stop timeout). It returns how long the
// exit took and whether heartbeatd exited cleanly (status 0, on SIGTERM alone).
func (h *Heartbeatd) Stop(tb testing.TB) (took time.Duration, clean bool) {
	tb.Helper()
	p := h.running()
	if p == nil {
		return 0, false
	}
	start := time.Now()
	onSignal := p.stop(syscall.SIGTERM, stopTimeout)
	return time.Since(start), onSignal && p.err == nil
}

// ConfigPath is the config file heartbeatd runs on: rewrite it and send SIGHUP to test a reload.
func (h *Heartbeatd) ConfigPath() string { return h.cfgPath }

// Log is heartbeatd's whole log so far.
func (h *Heartbeatd) Log() string {
	b, _ := os.ReadFile(h.logPath)
	return string(b)
}

// Exited reports whether the process has ended (crashed or stopped).
func (h *Heartbeatd) Exited() bool { return h.PID() == 0 }

// StartHeartbeatd starts heartbeatd and waits until /healthz answers. tb.Cleanup kills it.
func StartHeartbeatd(tb testing.TB, opts HeartbeatdOptions) *Heartbeatd {
	tb.Helper()
	return start(tb, LaunchHeartbeatd, []HeartbeatdOptions{opts})
}
