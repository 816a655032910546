package config

// Outputs are destinations besides the events topic. Kafka stays the system of record: an output
// follows the events Kafka acknowledged and never blocks or slows them.
type Outputs struct {
}

func (c *Config) validateOutputs(v *validator) {
}
