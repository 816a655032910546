package eventkafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/segmentio/kafka-go"
)

// TopicCreation says whether EnsureTopics creates the events and dead-letter topics when they are
// missing, and how (config: events.kafka.create_topics). Partitions and ReplicationFactor also go into
// the command a missing topic's error shows, so they matter with Create off too.
type TopicCreation struct {
	Create            bool
	Partitions        int
	ReplicationFactor int
}

// MissingTopicsError says which of heartbeatd's topics do not exist and the command that creates each.
type MissingTopicsError struct {
	Topics []string
	// Commands are kafka-topics.sh command lines, aligned with Topics.
	Commands []string
	// Cause is why creating them failed; nil when heartbeatd did not try.
	Cause error
}

func (e *MissingTopicsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "event: kafka topics missing: %s", strings.Join(e.Topics, ", "))
	if e.Cause != nil {
		// One line, for /readyz and the log: errors.Join puts a newline between its errors.
		fmt.Fprintf(&b, "; creating them failed: %s", strings.ReplaceAll(e.Cause.Error(), "\n", "; "))
	}
	// "; " keeps the commands one line that a shell also runs as it stands.
	fmt.Fprintf(&b, "; create them with: %s", strings.Join(e.Commands, "; "))
	return b.String()
}

func (e *MissingTopicsError) Unwrap() error { return e.Cause }

// createCommand is the kafka-topics.sh command line that creates topic as TopicCreation says. Against
// TLS or SASL brokers kafka-topics.sh needs the client settings in a properties file of its own.
func (p *Publisher) createCommand(topic string) string {
	cmd := fmt.Sprintf("kafka-topics.sh --bootstrap-server %s --create --topic %s --partitions %d --replication-factor %d",
		strings.Join(p.opts.Brokers, ","), topic, p.opts.Topics.Partitions, p.opts.Topics.ReplicationFactor)
	if p.opts.TLS != nil || p.opts.SASL != nil {
		cmd += " --command-config client.properties"
	}
	return cmd
}

// topicNames are the topics this publisher writes to.
func (p *Publisher) topicNames() []string {
	if p.opts.DeadLetterTopic == "" {
		return []string{p.opts.Topic}
	}
	return []string{p.opts.Topic, p.opts.DeadLetterTopic}
}

// probeClient is a client on a transport of its own, which the caller closes: the writer's metadata is
// a cache that keeps answering while the brokers are gone.
func (p *Publisher) probeClient() (*kafka.Client, *kafka.Transport) {
	t := newTransport(p.opts)
	return &kafka.Client{Addr: p.addr, Transport: t}, t
}

// missingTopics asks the brokers which of the publisher's topics do not exist. kafka-go's metadata
// request says allow_auto_topic_creation false, so asking never creates one.
func (p *Publisher) missingTopics(ctx context.Context, client *kafka.Client) ([]string, error) {
	res, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: p.topicNames()})
	if err != nil {
		return nil, fmt.Errorf("event: kafka not reachable: %w", err)
	}
	var missing []string
	for _, name := range p.topicNames() {
		i := slices.IndexFunc(res.Topics, func(t kafka.Topic) bool { return t.Name == name })
		switch {
		case i < 0 || errors.Is(res.Topics[i].Error, kafka.UnknownTopicOrPartition):
			missing = append(missing, name)
		case res.Topics[i].Error != nil:
			return nil, fmt.Errorf("event: kafka topic %s: %w", name, res.Topics[i].Error)
		case len(res.Topics[i].Partitions) == 0:
			return nil, fmt.Errorf("event: kafka topic %s has no partitions", name)
		}
	}
	return missing, nil
}

// EnsureTopics creates the events and dead-letter topics that do not exist when TopicCreation.Create is
// set, and returns the ones it created. A topic it cannot create, or any missing one with Create off, is
// a *MissingTopicsError naming each and its command. A topic another replica created meanwhile counts
// as there. Existing topics are left as they are, whatever their partitions.
func (p *Publisher) EnsureTopics(ctx context.Context) ([]string, error) {
	return p.ensureTopics(ctx, p.opts.Topics.Create)
}

// ensureTopics is EnsureTopics, creating the missing topics only when create is set; without, it is
// Ready's probe.
func (p *Publisher) ensureTopics(ctx context.Context, create bool) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, p.probeT)
	defer cancel()
	client, t := p.probeClient()
	defer t.CloseIdleConnections()
	missing, err := p.missingTopics(ctx, client)
	if err != nil {
		return nil, err
	}
	if len(missing) == 0 {
		return nil, nil
	}
	if !create {
		return nil, p.missingError(missing, nil)
	}
	req := &kafka.CreateTopicsRequest{}
	for _, name := range missing {
		req.Topics = append(req.Topics, kafka.TopicConfig{Topic: name, NumPartitions: p.opts.Topics.Partitions,
			ReplicationFactor: p.opts.Topics.ReplicationFactor})
	}
	res, err := client.CreateTopics(ctx, req)
	if err != nil {
		return nil, p.missingError(missing, err)
	}
	var created, failed []string
	var errs []error
	for _, name := range missing {
		switch err := res.Errors[name]; {
		case err == nil:
			created = append(created, name)
		case errors.Is(err, kafka.TopicAlreadyExists):
		default:
			failed = append(failed, name)
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	if len(failed) > 0 {
		return created, p.missingError(failed, errors.Join(errs...))
	}
	return created, nil
}

func (p *Publisher) missingError(topics []string, cause error) *MissingTopicsError {
	e := &MissingTopicsError{Topics: topics, Cause: cause}
	for _, name := range topics {
		e.Commands = append(e.Commands, p.createCommand(name))
	}
	return e
}
