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
	n := fleetSize(t)
	f := startFleet(t, fleetOptions{})
	hb := f.startDaemon(daemonOptions{})
	p := f.publisher("devices")
	silent := ids("silent", n)
	f.keep(ids("keeper", max(n/10, 10)))

	sent := p.paced(silent, timeout)
	f.firstInterruption(hb)
	f.kafka.Stop()
	// The outage's length is the fault itself, not a condition to await.
	time.Sleep(kafkaOutage(n))
	// Deadlines passed while the broker was gone: the outage overlapped the expiry.
	require.Less(t, f.events.reported(silent), len(silent), "the whole expiry was published before the outage")
	f.kafka.Start(t)
	require.NoError(t, <-sent)

	f.events.awaitReported(t, silent, scaled(n, 60*time.Second))
	b := f.barrier(p, "kafka", scaled(n, 30*time.Second))
	report(t, f.events.tallyInterrupted("kafka_outage", n, concat(silent, b)), hb.LogTail)
}
