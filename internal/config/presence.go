package config

import (
	"fmt"
	"strings"
)

// PresenceTable describes the presence subscriptions for check-config: which topics carry a broker's
// word about its devices, and the offline grace; "" when no subscription is a presence one.
func (c *Config) PresenceTable() string {
	var b strings.Builder
	for _, s := range c.Ingest.MQTT.Subscriptions {
		if s.Presence == "" {
			continue
		}
		payload := "any payload"
		if s.Payload != "" {
			payload = fmt.Sprintf("payload %q", s.Payload)
		}
		fmt.Fprintf(&b, "  %s: %s (%s)\n", s.Presence, s.Topic, payload)
	}
	if b.Len() == 0 {
		return ""
	}
	return fmt.Sprintf("presence: an offline message interrupts its device %s after it unless it signals meanwhile\n%s",
		FormatDuration(c.Ingest.OfflineGrace), b.String())
}
