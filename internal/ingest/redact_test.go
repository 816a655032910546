package ingest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBrokerURLsAreRedacted(t *testing.T) {
	require.Equal(t, "tcp://a:redacted@h:1,ssl://h:2", redactBrokers([]string{"tcp://a:b@h:1", "ssl://h:2"}))

	_, err := NewMQTTSource(MQTTOptions{Brokers: []string{"http://user:hunter2@h:80"}, ClientID: "c",
		Subscriptions: []Subscription{{Topic: "d/{device_id}"}}})
	require.ErrorContains(t, err, `"http://user:redacted@h:80": unknown scheme`)
	require.NotContains(t, err.Error(), "hunter2")
	_, err = NewMQTTSource(MQTTOptions{Brokers: []string{"tcp://user:hunter2@"}, ClientID: "c",
		Subscriptions: []Subscription{{Topic: "d/{device_id}"}}})
	require.ErrorContains(t, err, "want scheme://host:port")
	require.NotContains(t, err.Error(), "hunter2")
}
