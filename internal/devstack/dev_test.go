package devstack

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// TestDevShowsAnAlarm: `heartbeatd dev` needs nothing installed and shows an interrupted event and an
// early warning (late, of the dev config's trackers) within a minute (README.md), answers on the HTTP address it was given, and stops cleanly when its context ends
// (the command cancels it on SIGTERM).
func TestDevShowsAnAlarm(t *testing.T) {
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout, w := io.Pipe()
	start := time.Now()
	var devErr error
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		devErr = Dev(ctx, DevOptions{HTTPListen: httpAddr, Stdout: w, AnyPorts: true})
		_ = w.Close()
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Error("Dev did not return within 10s of its context ending")
		}
	})
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // the test stopped reading; keep draining so Dev never blocks on its stdout
			}
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout) // a line too long for the scanner must not block Dev either
	}()

	// The event printer's line, "INTERRUPTED <device> (<type>) silent …". A plain "interrupted" would also
	// match the banner's `curl …?state=interrupted` hint.
	var output []string
	var alarm, late string
	timeout := time.After(60 * time.Second)
	for alarm == "" || late == "" {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "Dev returned before an alarm:\n%s", strings.Join(output, "\n"))
			output = append(output, line)
			if strings.Contains(line, "INTERRUPTED ") && alarm == "" {
				alarm = line
			}
			if strings.Contains(line, "LATE ") && late == "" {
				late = line
			}
		case <-timeout:
			t.Fatalf("no interrupted and late events within 60s:\n%s", strings.Join(output, "\n"))
		}
	}
	t.Logf("first alarm and warning by %v after start: %s; %s", time.Since(start).Round(time.Millisecond), alarm, late)
	// The presence stories: the pump's reported failure and the last will's offline (presence.go).
	causes := map[string]string{": reported (" + pumpReason + ")": "", ": offline": ""}
	for seen := 0; seen < len(causes); {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "Dev returned before the causes:\n%s", strings.Join(output, "\n"))
			output = append(output, line)
			for c, got := range causes {
				if got == "" && strings.Contains(line, "INTERRUPTED ") && strings.Contains(line, c) {
					causes[c] = line
					seen++
				}
			}
		case <-timeout:
			t.Fatalf("no interrupted event with each cause within 60s: %v\n%s", causes, strings.Join(output, "\n"))
		}
	}
	banner := strings.Join(output, "\n")
	require.Contains(t, banner, "http://localhost:"+httpAddr[strings.LastIndex(httpAddr, ":")+1:], "the banner names the API address")

	code, _, err := getURL("http://" + httpAddr + "/v1/devices?state=interrupted")
	require.NoError(t, err)
	require.Equal(t, 200, code)

	cancel()
	stopped := time.Now()
	select {
	case <-exited:
		require.NoError(t, devErr, "Dev must return nil when its context ends")
		t.Logf("cancel to return: %v", time.Since(stopped).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("Dev did not return within 10s of its context ending")
	}
}

// getURL fetches url without keeping the connection: status and body.
func getURL(url string) (int, string, error) {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
