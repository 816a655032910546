package deploy_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// The compose Mosquitto as a device meets it: the mosquitto service's own start script builds the
// password file from the secrets (deploy/secrets/mqtt-devices included), and a real mosquitto with
// deploy/mosquitto.acl lets heartbeatd read the signals and its probe topic, and lets a device account
// publish its own signals but not another device's.
func TestComposeMosquittoDeviceAccounts(t *testing.T) {
	mosquitto, err := testenv.LookPath("mosquitto")
	if err != nil {
		testenv.Need(t, "mosquitto (apt-get install mosquitto)", err)
	}
	if _, err := testenv.LookPath("mosquitto_passwd"); err != nil {
		testenv.Need(t, "mosquitto_passwd (apt-get install mosquitto)", err)
	}
	var c struct {
		Services map[string]struct{ Command []string }
	}
	b, err := os.ReadFile("../docker-compose.yml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &c))
	cmd := c.Services["mosquitto"].Command
	require.Len(t, cmd, 3, "sh -ec SCRIPT")

	// The script, with compose's $$ unescaped and its container paths moved into a directory here; it
	// stops before handing over to mosquitto (chown and exec need the container).
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets")
	require.NoError(t, os.Mkdir(secrets, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(secrets, "mqtt-password"), []byte("hb-pass\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(secrets, "mqtt-devices"), []byte("# devices\ndev-1:pw-1\ndev-2:pw:2"), 0o600))
	script := strings.NewReplacer("$$", "$", "/run/secrets/", secrets+"/", "/mosquitto/config/passwd", filepath.Join(dir, "passwd")).
		Replace(cmd[2])
	script, _, found := strings.Cut(script, "chown ")
	require.True(t, found, "the script ends with chown and exec:\n%s", cmd[2])
	out, err := exec.Command("sh", "-ec", script).CombinedOutput()
	require.NoError(t, err, "%s", out)

	port := testenv.FreePort(t)
	acl, err := filepath.Abs("mosquitto.acl")
	require.NoError(t, err)
	conf := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous false\npassword_file %s\nacl_file %s\n", port, filepath.Join(dir, "passwd"), acl)
	if os.Geteuid() == 0 {
		conf += "user root\n" // else it switches to the mosquitto user, who cannot read the test's files
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "mosquitto.conf"), []byte(conf), 0o600))
	// deploy/mosquitto.conf must load the same ACL where compose mounts it.
	mainConf, err := os.ReadFile("mosquitto.conf")
	require.NoError(t, err)
	require.Contains(t, string(mainConf), "\nacl_file /mosquitto/config/acl\n")
	require.Contains(t, string(b), "./deploy/mosquitto.acl:/mosquitto/config/acl:ro")

	proc := exec.Command(mosquitto, "-c", filepath.Join(dir, "mosquitto.conf"))
	var log strings.Builder
	proc.Stdout, proc.Stderr = &log, &log
	require.NoError(t, proc.Start())
	t.Cleanup(func() { _ = proc.Process.Kill(); _ = proc.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	require.Eventually(t, func() bool {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
		}
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "mosquitto did not listen: %s", &log)

	connect := func(user, pass string) mqtt.Client {
		cl := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(user).
			SetUsername(user).SetPassword(pass).SetAutoReconnect(false))
		tok := cl.Connect()
		require.True(t, tok.WaitTimeout(5*time.Second))
		require.NoError(t, tok.Error(), "%s logs in", user)
		t.Cleanup(func() { cl.Disconnect(0) })
		return cl
	}
	wait := func(tok mqtt.Token) {
		t.Helper()
		require.True(t, tok.WaitTimeout(5*time.Second))
		require.NoError(t, tok.Error())
	}

	// heartbeatd, client id "heartbeatd" as in configs/compose.yaml: the signal subscriptions and its probe.
	got := make(chan string, 16)
	hb := connect("heartbeatd", "hb-pass")
	for _, filter := range []string{"devices/+/heartbeat", "fleet/+/+/telemetry", "heartbeatd/probe/heartbeatd"} {
		tok := hb.Subscribe(filter, 1, func(_ mqtt.Client, m mqtt.Message) { got <- m.Topic() })
		wait(tok)
		require.NotEqual(t, byte(0x80), tok.(*mqtt.SubscribeToken).Result()[filter], "heartbeatd may subscribe to %s", filter)
	}
	next := func() string {
		select {
		case topic := <-got:
			return topic
		case <-time.After(5 * time.Second):
			t.Fatal("no message within 5s")
			return ""
		}
	}
	wait(hb.Publish("heartbeatd/probe/heartbeatd", 1, false, "probe"))
	require.Equal(t, "heartbeatd/probe/heartbeatd", next(), "heartbeatd reads its own probe")

	// A device publishes another device's signal first, then its own: its own arriving alone (one
	// connection's messages arrive in order) shows the other was refused.
	dev := connect("dev-1", "pw-1")
	wait(dev.Publish("devices/dev-2/heartbeat", 1, false, ""))
	wait(dev.Publish("fleet/sensor/dev-2/telemetry", 1, false, "{}"))
	wait(dev.Publish("devices/dev-1/heartbeat", 1, false, ""))
	require.Equal(t, "devices/dev-1/heartbeat", next())
	wait(dev.Publish("fleet/sensor/dev-1/telemetry", 1, false, "{}"))
	require.Equal(t, "fleet/sensor/dev-1/telemetry", next())
	connect("dev-2", "pw:2") // a password may contain ":"

	bad := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("dev-1").SetUsername("dev-1").
		SetPassword("wrong").SetAutoReconnect(false))
	tok := bad.Connect()
	require.True(t, tok.WaitTimeout(5*time.Second))
	require.Error(t, tok.Error(), "a wrong password is refused")
}
