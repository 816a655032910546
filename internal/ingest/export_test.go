package ingest

// Queued is how many submitted signals the batcher has not taken yet: a test that needs them in the
// batch being built waits for 0.
func (c *Chain) Queued() int { return len(c.in) }
