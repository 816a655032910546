package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// AlertmanagerOptions configures StartAlertmanager.
type AlertmanagerOptions struct {
	// Config is alertmanager.yml; "" means one route to a receiver that notifies no one.
	Config string
}

// defaultAlertmanagerConfig routes every alert to a receiver without integrations: alerts are stored
// and served by the API, nothing is sent anywhere.
const defaultAlertmanagerConfig = `route:
  receiver: "null"
receivers:
  - name: "null"
`

// Alertmanager is a prometheus-alertmanager process on its own port and directory, its HA gossip off
// (--cluster.listen-address=""). Alerts live in its memory only: Stop and Start lose them (silences and
// the notification log are kept in its directory), Pause and Resume do not. Stop, Kill, Start, PID, Dir
// and LogTail control the process.
type Alertmanager struct {
	URL string // "http://127.0.0.1:port"

	port int
	*server
}

// launchAlertmanager is StartAlertmanager without a test (see the package comment for dir).
func launchAlertmanager(ctx context.Context, dir string, opts AlertmanagerOptions) (*Alertmanager, error) {
	srv, err := newServer("prometheus-alertmanager", dir, "alertmanager.log")
	if err != nil {
		return nil, err
	}
	a := &Alertmanager{server: srv}
	conf := opts.Config
	if conf == "" {
		conf = defaultAlertmanagerConfig
	}
	confPath := filepath.Join(srv.dir, "alertmanager.yml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		srv.Close()
		return nil, fmt.Errorf("testenv: write alertmanager config: %w", err)
	}
	a.probe = a.ready
	return a, a.firstLaunch(ctx, func() error {
		if a.port, err = freePort(); err != nil {
			return err
		}
		a.URL = "http://127.0.0.1:" + strconv.Itoa(a.port)
		a.args = []string{
			"--config.file=" + confPath,
			"--storage.path=" + filepath.Join(srv.dir, "data"),
			"--web.listen-address=127.0.0.1:" + strconv.Itoa(a.port),
			"--cluster.listen-address=", // no gossip: one instance, no port of its own to collide
			"--log.level=info",
		}
		return nil
	})
}

// ready is the readiness probe: nil once /-/ready answers 200.
func (a *Alertmanager) ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+"/-/ready", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/-/ready answered %s", resp.Status)
	}
	return nil
}

// Pause stops the process with SIGSTOP: it keeps its alerts and its port, and answers nothing (a
// connection is accepted by the kernel, no answer follows) until Resume.
func (a *Alertmanager) Pause(tb testing.TB) {
	tb.Helper()
	a.signal(tb, syscall.SIGSTOP)
}

// Resume continues a paused process (SIGCONT).
func (a *Alertmanager) Resume(tb testing.TB) {
	tb.Helper()
	a.signal(tb, syscall.SIGCONT)
}

func (a *Alertmanager) signal(tb testing.TB, sig syscall.Signal) {
	tb.Helper()
	a.mu.Lock()
	p := a.proc
	a.mu.Unlock()
	if p == nil || p.exited() {
		tb.Fatalf("testenv: alertmanager is not running\n%s", a.LogTail())
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		tb.Fatalf("testenv: signal alertmanager: %v", err)
	}
}

// Close resumes a paused process first, so the kill is not left pending on a stopped one.
func (a *Alertmanager) Close() {
	a.mu.Lock()
	p := a.proc
	a.mu.Unlock()
	if p != nil && !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	a.server.Close()
}

// Alert is one alert as Alertmanager's GET /api/v2/alerts serves it.
type Alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      time.Time         `json:"endsAt"`
	UpdatedAt   time.Time         `json:"updatedAt"`
	Fingerprint string            `json:"fingerprint"`
	Status      struct {
		State string `json:"state"` // active, suppressed, unprocessed
	} `json:"status"`
}

// Alerts returns the alerts Alertmanager holds and has not resolved (active, silenced, inhibited and
// unprocessed ones: the API's defaults).
func (a *Alertmanager) Alerts(ctx context.Context) ([]Alert, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+"/api/v2/alerts", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("testenv: alertmanager alerts: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("testenv: alertmanager alerts: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("testenv: alertmanager alerts: %s: %s", resp.Status, body)
	}
	var out []Alert
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("testenv: alertmanager alerts: %w", err)
	}
	return out, nil
}

// StartAlertmanager starts prometheus-alertmanager on a free port with its own tb.TempDir and waits
// until /-/ready answers. tb.Cleanup kills it.
func StartAlertmanager(tb testing.TB, opts ...AlertmanagerOptions) *Alertmanager {
	tb.Helper()
	return start(tb, launchAlertmanager, opts)
}
