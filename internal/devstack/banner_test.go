package devstack

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBanner(t *testing.T) {
	stack := &Stack{RedisAddr: "127.0.0.1:16379", MQTTBroker: "tcp://127.0.0.1:11883", KafkaBrokers: []string{"127.0.0.1:19092"}}
	b := banner(stack, "127.0.0.1:8080")
	for _, line := range []string{
		"mosquitto_pub -h 127.0.0.1 -p 11883 -q 1 -t devices/my-dev/heartbeat -n",
		`mosquitto_pub -h 127.0.0.1 -p 11883 -q 1 -t fleet/gateway/gw-1/telemetry -m '{"ts":'$(date +%s%3N)',"battery":87}'`,
		"kcat -b 127.0.0.1:19092 -t heartbeat.events -C -o end",
		"curl -s localhost:8080/v1/stats",
		"Status page     http://localhost:8080/   (open it in a browser)",
		"curl -s 'localhost:8080/v1/devices?state=interrupted'",
		"redis-cli -p 16379 zrange 'hb:{0}:deadlines' 0 -1 withscores",
	} {
		require.Contains(t, b, "  "+line+"\n")
	}
	require.NotContains(t, b, "%!", "no formatting mistakes")

	// Fallback ports and a non-loopback API address show as they are.
	other := banner(&Stack{RedisAddr: "127.0.0.1:40001", MQTTBroker: "tcp://127.0.0.1:40002", KafkaBrokers: []string{"127.0.0.1:40003"}}, "10.0.0.5:9000")
	require.Contains(t, other, "redis-cli -p 40001 ")
	require.Contains(t, other, "mosquitto_pub -h 127.0.0.1 -p 40002 -q 1")
	require.Contains(t, other, "kcat -b 127.0.0.1:40003 -t heartbeat.events")
	require.Contains(t, other, "curl -s 10.0.0.5:9000/v1/stats")
	require.Contains(t, other, "Status page     http://10.0.0.5:9000/ ")
	require.False(t, strings.Contains(other, "16379") || strings.Contains(other, "11883") || strings.Contains(other, "19092"))
}
