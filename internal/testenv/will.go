package testenv

import (
	"bufio"
	"io"
	"net/url"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// WillClient is a device in a child process (mosquitto_sub) connected to the broker with a last will:
// Kill ends it with SIGKILL, so the broker, not the client, says it is gone.
type WillClient struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// ConnectWithWill starts mosquitto_sub as clientID with the will (QoS 1) on willTopic, and returns once the
// broker accepted the connection.
func (m *Mosquitto) ConnectWithWill(tb testing.TB, clientID, willTopic, willPayload string) *WillClient {
	tb.Helper()
	bin, err := LookPath("mosquitto_sub")
	if err != nil {
		Need(tb, "mosquitto_sub (package mosquitto-clients)", err)
	}
	u, err := url.Parse(m.Addr)
	if err != nil {
		tb.Fatalf("testenv: broker address %q: %v", m.Addr, err)
	}
	args := []string{bin, "-h", u.Hostname(), "-p", u.Port(), "-i", clientID, "-k", "60", "-q", "1", "-d",
		"-t", "heartbeatd-test/" + clientID, "--will-topic", willTopic, "--will-payload", willPayload, "--will-qos", "1"}
	// Its debug lines say when it subscribed; stdio buffers them in a pipe unless told otherwise.
	stdbuf, err := exec.LookPath("stdbuf")
	if err != nil {
		Need(tb, "stdbuf (package coreutils)", err)
	}
	cmd := exec.Command(stdbuf, append([]string{"-oL"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		tb.Fatalf("testenv: start mosquitto_sub: %v", err)
	}
	w := &WillClient{cmd: cmd, done: make(chan struct{})}
	connected := make(chan struct{})
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			if !signalled && strings.Contains(sc.Text(), "received SUBACK") {
				signalled = true
				close(connected)
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
	}()
	tb.Cleanup(w.Kill)
	select {
	case <-connected:
	case <-w.done:
		tb.Fatalf("testenv: mosquitto_sub %s ended before it subscribed", clientID)
	case <-time.After(20 * time.Second):
		w.Kill()
		tb.Fatalf("testenv: mosquitto_sub %s did not subscribe within 20s", clientID)
	}
	return w
}

// Kill ends the client with SIGKILL (no DISCONNECT: the broker publishes its will) and waits for it.
func (w *WillClient) Kill() {
	if w.cmd.Process != nil {
		_ = w.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-w.done
}
