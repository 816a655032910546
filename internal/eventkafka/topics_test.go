package eventkafka_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/eventkafka"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// A cluster without heartbeatd's topics (one broker, no automatic creation, as testenv runs it): with
// creation on, both are created with the configured partitions, /readyz's probe passes and events go
// out; a second replica starting later finds them and creates nothing.
func TestEnsureTopicsCreatesMissingTopics(t *testing.T) {
	k := testenv.StartKafka(t)
	opts := eventkafka.PublisherOptions{Brokers: k.Addrs,
		Topics: eventkafka.TopicCreation{Create: true, Partitions: 5, ReplicationFactor: 1}}
	p := newPublisher(t, opts)
	require.ErrorContains(t, p.Ready(context.Background()), "kafka topics missing: "+eventsTopic+", "+deadLetterTopic)

	created, err := p.EnsureTopics(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{eventsTopic, deadLetterTopic}, created)
	require.Equal(t, map[string]int{eventsTopic: 5, deadLetterTopic: 5}, k.Partitions(t, eventsTopic, deadLetterTopic))
	require.NoError(t, p.Ready(context.Background()))
	events := makeEvents(10, 10, time.Now())
	// The writer learns of the new topics from its next metadata refresh.
	require.Eventually(t, func() bool {
		for _, err := range p.Publish(context.Background(), events) {
			if err != nil {
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond)

	again, err := newPublisher(t, opts).EnsureTopics(context.Background())
	require.NoError(t, err)
	require.Empty(t, again)
}

// Only the missing topic is created; the one the operator made keeps its partitions.
func TestEnsureTopicsLeavesExistingTopicsAlone(t *testing.T) {
	k := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{eventsTopic}, Partitions: 2})
	p := newPublisher(t, eventkafka.PublisherOptions{Brokers: k.Addrs,
		Topics: eventkafka.TopicCreation{Create: true, Partitions: 7, ReplicationFactor: 1}})
	created, err := p.EnsureTopics(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{deadLetterTopic}, created)
	require.Equal(t, map[string]int{eventsTopic: 2, deadLetterTopic: 7}, k.Partitions(t, eventsTopic, deadLetterTopic))
}

// With creation off (a locked-down cluster) nothing is created: the error, and /readyz's, name each
// missing topic and the exact command that creates it with the configured partitions and replicas.
func TestEnsureTopicsOffNamesTopicsAndCommands(t *testing.T) {
	k := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{eventsTopic}})
	p := newPublisher(t, eventkafka.PublisherOptions{Brokers: k.Addrs,
		Topics: eventkafka.TopicCreation{Create: false, Partitions: 12, ReplicationFactor: 3}})
	want := "kafka-topics.sh --bootstrap-server " + k.Addrs[0] + " --create --topic " + deadLetterTopic +
		" --partitions 12 --replication-factor 3"

	created, err := p.EnsureTopics(context.Background())
	require.Empty(t, created)
	var missing *eventkafka.MissingTopicsError
	require.True(t, errors.As(err, &missing), "%v", err)
	require.Equal(t, []string{deadLetterTopic}, missing.Topics, "the events topic exists")
	require.Equal(t, []string{want}, missing.Commands)
	require.NoError(t, missing.Cause, "nothing was tried")
	require.ErrorContains(t, err, "kafka topics missing: "+deadLetterTopic+"; create them with: "+want)
	require.ErrorContains(t, p.Ready(context.Background()), want)
	require.Empty(t, k.Partitions(t, deadLetterTopic), "nothing created")
}

// A broker that refuses the creation (here: three replicas asked of a one-broker cluster) leaves
// heartbeatd unready with Kafka's reason, the topics and their commands.
func TestEnsureTopicsRefusedSaysWhyAndHow(t *testing.T) {
	k := testenv.StartKafka(t)
	p := newPublisher(t, eventkafka.PublisherOptions{Brokers: k.Addrs,
		Topics: eventkafka.TopicCreation{Create: true, Partitions: 12, ReplicationFactor: 3}})
	_, err := p.EnsureTopics(context.Background())
	var missing *eventkafka.MissingTopicsError
	require.True(t, errors.As(err, &missing), "%v", err)
	require.Equal(t, []string{eventsTopic, deadLetterTopic}, missing.Topics)
	require.ErrorContains(t, err, "creating them failed: "+eventsTopic+": [38] Invalid Replication Factor")
	require.ErrorContains(t, err, "--topic "+eventsTopic+" --partitions 12 --replication-factor 3")
	require.Error(t, p.Ready(context.Background()))
}
