package devstack

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// banner is the text `heartbeatd dev` prints once everything runs: where the servers listen and lines to
// copy into another terminal. httpListen is the daemon's http.listen address.
func banner(stack *Stack, httpListen string) string {
	redisHost, redisPort := splitHostPort(stack.RedisAddr)
	mqttHost, mqttPort := splitHostPort(stack.MQTTBroker)
	if u, err := url.Parse(stack.MQTTBroker); err == nil && u.Host != "" {
		mqttHost, mqttPort = splitHostPort(u.Host)
	}
	kafka := strings.Join(stack.KafkaBrokers, ",")
	api := httpListen
	if host, port, err := net.SplitHostPort(httpListen); err == nil {
		switch host {
		case "", "0.0.0.0", "::", "127.0.0.1", "localhost":
			api = "localhost:" + port
		}
	}
	redisCLI := "redis-cli -p " + redisPort
	if redisHost != "127.0.0.1" {
		redisCLI = "redis-cli -h " + redisHost + " -p " + redisPort
	}
	mqttPub := fmt.Sprintf("mosquitto_pub -h %s -p %s -q 1", mqttHost, mqttPort)

	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("heartbeatd dev: everything runs in this process, in memory; Ctrl-C stops it and forgets it all.")
	w("")
	w("  Redis protocol  %s", stack.RedisAddr)
	w("  MQTT            %s", stack.MQTTBroker)
	w("  Kafka           %s   topics %s, %s, %s", kafka, topicSignals, topicEvents, topicDeadletter)
	w("  HTTP API        http://%s", api)
	w("  Status page     http://%s/   (open it in a browser)", api)
	w("")
	w("A simulated fleet is publishing; some devices fall silent and some come back, so alarms show")
	w("below within a minute. Try it yourself from another terminal:")
	w("")
	w("  # a heartbeat for a new device (default type; silent 10s later = interrupted)")
	w("  %s -t devices/my-dev/heartbeat -n", mqttPub)
	w("  # telemetry of a gateway, with its own timestamp")
	w(`  %s -t fleet/gateway/gw-1/telemetry -m '{"ts":'$(date +%%s%%3N)',"battery":87}'`, mqttPub)
	w("  # a signal over Kafka (message key = device id)")
	w("  echo 'my-kafka-dev:{}' | kcat -b %s -t %s -P -K:", kafka, topicSignals)
	w("  # the events as they are published, and the dead letters")
	w("  kcat -b %s -t %s -C -o end", kafka, topicEvents)
	w("  kcat -b %s -t %s -C -o end", kafka, topicDeadletter)
	w("  # the API")
	w("  curl -s %s/v1/stats", api)
	w("  curl -s '%s/v1/devices?state=interrupted'", api)
	w("  curl -s %s/v1/devices/my-dev", api)
	w("  curl -s -X POST %s/v1/devices/my-dev/ack", api)
	w("  # the deadlines of slot 0 (score = deadline in Unix ms x 1024 + type index)")
	w("  %s zrange 'hb:{0}:deadlines' 0 -1 withscores", redisCLI)
	return b.String()
}

func splitHostPort(addr string) (host, port string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, ""
	}
	return host, port
}
