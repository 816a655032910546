package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

	sent := s.p.paced(s.silent, timeout)
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
