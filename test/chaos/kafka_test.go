package chaos

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/alarm"
)

// kafkaOutage is how long the broker stays down: 10s at 10000 devices and more, shorter for small
// fleets so `go test ./...` stays quick, never under 3s (several publish retries).
func kafkaOutage(n int) time.Duration {
	return min(max(time.Duration(n)*time.Millisecond, 3*time.Second), 10*time.Second)
}

// TestChaosKafkaOutage stops the Kafka broker (persistent, so what it had survives) during a mass expiry:
// the events that could not be published are published once it is back, none is lost.
func TestChaosKafkaOutage(t *testing.T) {
	s := startScenario(t, daemonOptions{})
	s.keepers(10)

	sent := paced(s.p, s.silent, timeout)
	s.firstInterruption()
	s.kafka.Stop()
	// The outage's length is the fault itself, not a condition to await.
	time.Sleep(kafkaOutage(s.n))
	// Deadlines passed while the broker was gone: the outage overlapped the expiry.
	require.Less(t, s.events.reported(s.silent), len(s.silent), "the whole expiry was published before the outage")
	s.kafka.Start(t)
	require.NoError(t, <-sent)
	s.finish("kafka_outage", "kafka", 60*time.Second)
}

// longKafkaOutage is how long TestChaosKafkaOutageLong keeps the broker down: HB_CHAOS_LONG_OUTAGE
// (a Go duration), default 15s so `make test` stays quick; `make chaos` sets 4m, longer than the
// default 10 publish attempts 1–30s apart take (≈ 3 min).
func longKafkaOutage(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv("HB_CHAOS_LONG_OUTAGE")
	if v == "" {
		return 15 * time.Second
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, "HB_CHAOS_LONG_OUTAGE")
	require.Positive(t, d, "HB_CHAOS_LONG_OUTAGE")
	return d
}

// TestChaosKafkaOutageLong keeps Kafka down far longer than any retry budget while devices expire. The
// budget here is detection.max_publish_attempts: 2, which counts only events Kafka refused for their
// content: were an outage's failed publications counted, every claim would be parked about 1.5s into
// it (≈ 3 min into it at the default 10). The outage spans several attempts of every claim (1s
// doubling, up to 30s: alarm.PublishBackoff) at either length of longKafkaOutage. Nothing may be parked
// (/v1/stats dead_claims 0, no parked list), and every device that expired meanwhile is reported once
// Kafka is back.
func TestChaosKafkaOutageLong(t *testing.T) {
	s := startScenario(t, daemonOptions{maxPublishAttempts: 2})
	s.keepers(10)

	sent := paced(s.p, s.silent, timeout)
	s.firstInterruption()
	s.kafka.Stop()
	stopped := time.Now()
	require.NoError(t, <-sent)
	time.Sleep(time.Until(stopped.Add(longKafkaOutage(t)))) // the outage's length is the fault itself
	require.Less(t, s.events.reported(s.silent), len(s.silent), "the whole expiry was published before the outage")
	during, err := getStats(s.hb)
	require.NoError(t, err)
	s.kafka.Start(t)
	// The last claims retry within alarm.PublishBackoffMax of Kafka's return.
	s.finish("kafka_outage_long", "kafka-long", 30*time.Second+alarm.PublishBackoffMax)
	after, err := getStats(s.hb)
	require.NoError(t, err)
	for when, st := range map[string]stats{"during": during, "after": after} {
		if st.DeadClaims != 0 || len(st.Parked) != 0 {
			t.Errorf("claims parked %s the outage: dead_claims=%d, first %+v", when, st.DeadClaims, st.Parked)
		}
	}
}
