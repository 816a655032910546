package notify

import (
	"context"
	"errors"
	"fmt"

	"github.com/segmentio/kafka-go"
)

// startAtEnd gives every partition of the events topic that the group has no offset for yet an offset at
// the partition's current end, before the group reads. A new notifier pages about what happens from its
// first start on, not about the topic's history; and an event published after that start is never
// skipped, even when the notifier dies before its first commit on that partition (a reader's own
// "start at the end" would look for the end again at its next start).
func (n *Notifier) startAtEnd(ctx context.Context) error {
	client, done := n.admin()
	defer done()
	topic := n.opts.Topic
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return fmt.Errorf("notify: metadata of %s: %w", topic, err)
	}
	var parts []int
	for _, t := range meta.Topics {
		if t.Name == topic {
			if t.Error != nil {
				return fmt.Errorf("notify: topic %s: %w", topic, t.Error)
			}
			for _, p := range t.Partitions {
				parts = append(parts, p.ID)
			}
		}
	}
	if len(parts) == 0 {
		return fmt.Errorf("notify: topic %s has no partitions yet", topic)
	}
	fetched, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: n.opts.Notify.GroupID,
		Topics: map[string][]int{topic: parts}})
	if err == nil && fetched.Error != nil {
		err = fetched.Error
	}
	committed := map[int]bool{}
	switch {
	case errors.Is(err, kafka.GroupIdNotFound): // a new group on some brokers (kfake); Kafka answers -1 offsets
	case err != nil:
		return fmt.Errorf("notify: the group's offsets: %w", err)
	default:
		for _, p := range fetched.Topics[topic] {
			committed[p.Partition] = p.Error == nil && p.CommittedOffset >= 0
		}
	}
	var missing []kafka.OffsetRequest
	for _, p := range parts {
		if !committed[p] {
			missing = append(missing, kafka.LastOffsetOf(p))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	ends, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: missing}})
	if err != nil {
		return fmt.Errorf("notify: the partitions' ends: %w", err)
	}
	var commits []kafka.OffsetCommit
	for _, p := range ends.Topics[topic] {
		if p.Error == nil {
			commits = append(commits, kafka.OffsetCommit{Partition: p.Partition, Offset: p.LastOffset})
		}
	}
	res, err := client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{GroupID: n.opts.Notify.GroupID, GenerationID: -1,
		Topics: map[string][]kafka.OffsetCommit{topic: commits}})
	if err != nil {
		return fmt.Errorf("notify: committing the partitions' ends: %w", err)
	}
	var errs []error
	for _, p := range res.Topics[topic] {
		if p.Error != nil {
			errs = append(errs, fmt.Errorf("partition %d: %w", p.Partition, p.Error))
		}
	}
	if err := errors.Join(errs...); err != nil {
		// A member of the group is running: it committed or will commit these partitions itself.
		n.log.Info("the group is already reading; not setting its start offsets")
	}
	return nil
}
