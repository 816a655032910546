package main_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// TestDevShowsAnAlarm: `heartbeatd dev` needs nothing installed and shows an interrupted event within a
// minute (SPEC §2), answers on the HTTP address it was given, and stops cleanly on SIGTERM.
//
// Dev mode prefers fixed ports (devstack.RedisPort, MQTTPort, KafkaPort) and falls back to free ones when
// they are taken, so it can run beside another dev stack or test.
func TestDevShowsAnAlarm(t *testing.T) {
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	bin := testenv.HeartbeatdBinary(t) // built first: the build must not eat the run's time limit
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "dev", "-http", httpAddr)
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	start := time.Now()
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // the test stopped reading; keep draining so the process never blocks on its stdout
			}
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})

	// The event printer's line, "INTERRUPTED <device> (<type>) silent …". A plain "interrupted" would also
	// match the banner's `curl …?state=interrupted` hint.
	var output []string
	var alarm string
	timeout := time.After(60 * time.Second)
	for alarm == "" {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "heartbeatd dev exited before an alarm:\n%s", strings.Join(output, "\n"))
			output = append(output, line)
			if strings.Contains(line, "INTERRUPTED ") {
				alarm = line
			}
		case <-timeout:
			t.Fatalf("no interrupted event within 60s:\n%s", strings.Join(output, "\n"))
		}
	}
	t.Logf("first alarm %v after start: %s", time.Since(start).Round(time.Millisecond), alarm)
	banner := strings.Join(output, "\n")
	require.Contains(t, banner, "http://localhost:"+httpAddr[strings.LastIndex(httpAddr, ":")+1:], "the banner names the API address")

	code, _, err := getURL("http://" + httpAddr + "/v1/devices?state=interrupted")
	require.NoError(t, err)
	require.Equal(t, 200, code)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	stopped := time.Now()
	select {
	case err := <-exited:
		require.NoError(t, err, "heartbeatd dev must exit with status 0 on SIGTERM")
		t.Logf("SIGTERM to exit: %v", time.Since(stopped).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("heartbeatd dev did not exit within 10s of SIGTERM")
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
