package main_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// smokeConfig is a config for the real binary on the test's servers: gateways time out after 1s.
func smokeConfig(redisAddr, mqttAddr string, kafka []string) string {
	return fmt.Sprintf(`
redis: {addrs: [%q], slots: 8}
types:
  default: {timeout: 1s, repeat_every: 0s}
  gateway: {timeout: 1s}
ingest:
  mqtt:
    brokers: [%q]
    client_id: smoke
    subscriptions: [{topic: "devices/{device_id}/heartbeat"}]
events:
  kafka: {brokers: [%q]}
detection: {grace_after_outage: 100ms}
log: {level: debug, format: console}
`, redisAddr, mqttAddr, strings.Join(kafka, ","))
}

func TestSmokeSignalToInterrupted(t *testing.T) {
	rdb := testenv.StartRedis(t)
	broker := testenv.StartMosquitto(t)
	kafka := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{"heartbeat.events", "heartbeat.deadletter"}})
	hb := testenv.StartHeartbeatd(t, testenv.HeartbeatdOptions{Config: smokeConfig(rdb.Addr, broker.Addr, kafka.Addrs)})

	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(broker.Addr).SetClientID("smoke-device"))
	tok := c.Connect()
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())
	defer c.Disconnect(0)
	require.Eventually(t, func() bool {
		code, body, _ := hb.Get("/readyz")
		return code == 200 || !strings.Contains(body, "mqtt")
	}, 20*time.Second, 50*time.Millisecond)
	tok = c.Publish("devices/dev-1/heartbeat", 1, false, `{"type":"gateway"}`)
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())

	recs := kafka.ReadAll(t, "heartbeat.events", 1, 20*time.Second)
	require.NotEmpty(t, recs, hb.LogTail())
	ev, err := event.Decode(recs[0].Value)
	require.NoError(t, err)
	require.Equal(t, event.Interrupted, ev.Kind)
	require.Equal(t, "dev-1", ev.DeviceID)

	took, clean := hb.Stop(t)
	require.True(t, clean, hb.LogTail())
	require.Less(t, took, 5*time.Second)
}
