package devstack

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test must leave nothing running: the servers, the fleet's MQTT client and the printer's Kafka
// client all stop with their owner.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
