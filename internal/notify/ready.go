package notify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"
)

// readyBehind is how many records the partitions a notifier holds may be behind their ends (its
// uncommitted reads, a burst being worked off) before /readyz calls it not ready (Notifier.readyBehind).
const readyBehind = 10_000

// memberID names this process to the consumer group (Kafka's client id), so Ready can find its own
// membership among the group's: host, pid and a random part, as two processes may share a host.
func memberID() string {
	host, _ := os.Hostname()
	var r [4]byte
	_, _ = rand.Read(r[:])
	return fmt.Sprintf("heartbeatd-notify-%s-%d-%s", host, os.Getpid(), hex.EncodeToString(r[:]))
}

// admin is a Kafka client of the events topic's brokers for the group's offsets and membership; done
// closes its connections.
func (n *Notifier) admin() (client *kafka.Client, done func()) {
	transport := &kafka.Transport{DialTimeout: 10 * time.Second, ClientID: n.clientID}
	if d := n.opts.Dialer; d != nil {
		transport.TLS, transport.SASL = d.TLS, d.SASLMechanism
	}
	return &kafka.Client{Addr: kafka.TCP(n.opts.Brokers...), Timeout: 10 * time.Second, Transport: transport},
		transport.CloseIdleConnections
}

// Ready is nil when the notifier does its work (the standalone `heartbeatd notify`'s /readyz): Redis
// answers, this process is a member of its consumer group with its share assigned (none is a share too,
// when the group has more members than the topic partitions), and the partitions it holds are at most
// n.readyBehind records behind their ends. A receiver that is down does not make it unready: its
// notifications are kept in Redis and the notifier reads on.
func (n *Notifier) Ready(ctx context.Context) map[string]error {
	return map[string]error{"redis": n.opts.Redis.Ping(ctx).Err(), "events": n.consuming(ctx)}
}

// consuming is Ready's check of the group: membership, then how far behind the held partitions are.
func (n *Notifier) consuming(ctx context.Context) error {
	client, done := n.admin()
	defer done()
	group, topic := n.opts.Notify.GroupID, n.opts.Topic
	res, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil {
		return fmt.Errorf("describing group %s: %w", group, err)
	}
	var held []int
	member, state := false, "unknown"
	for _, g := range res.Groups {
		if g.GroupID != group {
			continue
		}
		if g.Error != nil {
			return fmt.Errorf("group %s: %w", group, g.Error)
		}
		state = g.GroupState
		for _, m := range g.Members {
			if m.ClientID != n.clientID {
				continue
			}
			member = true
			for _, t := range m.MemberAssignments.Topics {
				if t.Topic == topic {
					held = append(held, t.Partitions...)
				}
			}
		}
	}
	if !member {
		return fmt.Errorf("not (yet) a member of consumer group %s (state %s)", group, state)
	}
	if state != "Stable" {
		return fmt.Errorf("consumer group %s is %s, not Stable: its partitions are being assigned", group, state)
	}
	if len(held) == 0 {
		return nil
	}
	behind, err := n.behind(ctx, client, held)
	if err != nil {
		return err
	}
	if behind > n.readyBehind {
		return fmt.Errorf("%d records behind on partitions %v of %s (at most %d)", behind, held, topic, n.readyBehind)
	}
	return nil
}

// behind sums, over the partitions, the records between the group's committed offset and the end.
func (n *Notifier) behind(ctx context.Context, client *kafka.Client, parts []int) (int64, error) {
	group, topic := n.opts.Notify.GroupID, n.opts.Topic
	fetched, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	if err == nil && fetched.Error != nil {
		err = fetched.Error
	}
	if err != nil {
		return 0, fmt.Errorf("the group's offsets: %w", err)
	}
	committed := map[int]int64{}
	for _, p := range fetched.Topics[topic] {
		if p.Error == nil && p.CommittedOffset >= 0 {
			committed[p.Partition] = p.CommittedOffset
		}
	}
	var reqs []kafka.OffsetRequest
	for _, p := range parts {
		reqs = append(reqs, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	ends, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return 0, fmt.Errorf("the partitions' ends: %w", err)
	}
	var sum int64
	var errs []error
	for _, p := range ends.Topics[topic] {
		if !slices.Contains(parts, p.Partition) {
			continue
		}
		if p.Error != nil {
			errs = append(errs, fmt.Errorf("partition %d: %w", p.Partition, p.Error))
			continue
		}
		c, ok := committed[p.Partition]
		switch {
		case !ok && n.opts.StartOffset == kafka.FirstOffset: // a group reading from the start reads from there
			c = p.FirstOffset
		case !ok: // startAtEnd commits every partition before the group reads
			return 0, fmt.Errorf("partition %d of %s has no committed offset yet: not started", p.Partition, topic)
		}
		sum += max(0, p.LastOffset-c)
	}
	return sum, errors.Join(errs...)
}
