package testenv_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// mqttConnect connects a paho client; sessionID "" means a clean session with a generated id.
func mqttConnect(t *testing.T, broker, sessionID string, tlsConf *tls.Config, onMessage mqtt.MessageHandler) (mqtt.Client, error) {
	t.Helper()
	o := mqtt.NewClientOptions().SetAutoReconnect(false).SetConnectRetry(false).
		SetConnectTimeout(5 * time.Second).SetOrderMatters(false)
	if sessionID == "" {
		o.SetClientID(fmt.Sprintf("testenv-%d", time.Now().UnixNano())).SetCleanSession(true)
	} else {
		o.SetClientID(sessionID).SetCleanSession(false)
	}
	if tlsConf != nil {
		o.SetTLSConfig(tlsConf)
	}
	// Set before Connect: a resumed session's backlog arrives right after CONNACK.
	if onMessage != nil {
		o.SetDefaultPublishHandler(onMessage)
	}
	c, err := testenv.ConnectMQTT(broker, o)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Disconnect(0) })
	return c, nil
}

func wait(t *testing.T, tok mqtt.Token) {
	t.Helper()
	require.True(t, tok.WaitTimeout(10*time.Second), "mqtt token timed out")
	require.NoError(t, tok.Error())
}

// counter counts distinct payloads received.
type counter struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (c *counter) handle(_ mqtt.Client, m mqtt.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	c.seen[string(m.Payload())] = true
}

func (c *counter) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

func TestMosquittoPubSubAndRestart(t *testing.T) {
	m := testenv.StartMosquitto(t)
	require.True(t, strings.HasPrefix(m.Addr, "tcp://127.0.0.1:"), m.Addr)
	require.Empty(t, m.TLSAddr)
	var got counter
	sub, err := mqttConnect(t, m.Addr, "", nil, nil)
	require.NoError(t, err)
	wait(t, sub.Subscribe("a/#", 1, got.handle))
	pub, err := mqttConnect(t, m.Addr, "", nil, nil)
	require.NoError(t, err)
	wait(t, pub.Publish("a/b", 1, false, "hello"))
	require.Eventually(t, func() bool { return got.n() == 1 }, 10*time.Second, 10*time.Millisecond)

	pid := m.PID()
	m.Kill(t)
	require.Zero(t, m.PID())
	_, err = mqttConnect(t, m.Addr, "", nil, nil)
	require.Error(t, err, "a killed broker refuses connections")
	m.Start(t)
	require.NotEqual(t, pid, m.PID())
	_, err = mqttConnect(t, m.Addr, "", nil, nil)
	require.NoError(t, err, "same address after a restart")
}

// With persistence, a persistent session's subscription and its QoS 1 backlog survive a graceful restart,
// past the default max_queued_messages of 1000 that would drop most of it.
func TestMosquittoPersistentSessionSurvivesRestart(t *testing.T) {
	const n = 3000
	m := testenv.StartMosquitto(t, testenv.MosquittoOptions{Persistence: true})
	sub, err := mqttConnect(t, m.Addr, "hb-sub", nil, nil)
	require.NoError(t, err)
	wait(t, sub.Subscribe("devices/+/heartbeat", 1, nil))
	sub.Disconnect(0)

	pub, err := mqttConnect(t, m.Addr, "", nil, nil)
	require.NoError(t, err)
	var toks []mqtt.Token
	for i := range n {
		toks = append(toks, pub.Publish("devices/d"+strconv.Itoa(i)+"/heartbeat", 1, false, strconv.Itoa(i)))
	}
	for _, tok := range toks {
		wait(t, tok)
	}
	pub.Disconnect(0)

	m.Stop(t)
	m.Start(t)

	var got counter
	_, err = mqttConnect(t, m.Addr, "hb-sub", nil, got.handle)
	require.NoError(t, err)
	if !assert.Eventually(t, func() bool { return got.n() == n }, 20*time.Second, 10*time.Millisecond) {
		t.Fatalf("backlog after restart: %d of %d\n%s", got.n(), n, m.LogTail())
	}
}

func TestMosquittoTLS(t *testing.T) {
	files := testenv.GenerateTLS(t)
	m := testenv.StartMosquitto(t, testenv.MosquittoOptions{TLS: files, RequireClientCert: true})
	require.True(t, strings.HasPrefix(m.TLSAddr, "ssl://127.0.0.1:"), m.TLSAddr)

	_, err := mqttConnect(t, m.TLSAddr, "", files.ClientConfig(t), nil)
	require.NoError(t, err, "the generated CA and client certificate are accepted")

	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(files.CAPEM))
	_, err = mqttConnect(t, m.TLSAddr, "", &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil)
	require.Error(t, err, "no client certificate, refused")

	other := testenv.GenerateTLS(t)
	_, err = mqttConnect(t, m.TLSAddr, "", other.ClientConfig(t), nil)
	require.Error(t, err, "a server certificate from another CA is not trusted")

	_, err = mqttConnect(t, m.Addr, "", nil, nil)
	require.NoError(t, err, "the plain listener stays")

	m.Stop(t)
	m.Start(t)
	_, err = mqttConnect(t, m.TLSAddr, "", files.ClientConfig(t), nil)
	require.NoError(t, err, "TLS listener back after a restart")
}
