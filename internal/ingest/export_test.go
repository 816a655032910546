package ingest

import "time"

// Queued is how many submitted signals the batcher has not taken yet: a test that needs them in the
// batch being built waits for 0.
func (c *Chain) Queued() int { return len(c.in) }

// MQTTArrived counts the signals s has taken from its broker (probes not included).
func MQTTArrived(s *MQTTSource) uint64 {
	s.pending.mu.Lock()
	defer s.pending.mu.Unlock()
	return s.pending.first + uint64(len(s.pending.entries))
}

// WidenAlignment makes the Kafka sources started until restore wait up to maxWait for a partition's
// chunk and count a partition as stalled after stall.
func WidenAlignment(maxWait, stall time.Duration) (restore func()) {
	old := newSourceAligner
	newSourceAligner = func() *aligner { return newAligner(maxWait, stall) }
	return func() { newSourceAligner = old }
}
