package ingest

import (
	"context"
	"time"

	"github.com/segmentio/kafka-go"
)

// A Kafka source's health: the group's lag and rebalances as the hold-back sees them, and this
// replica's own share as readiness sees it.

// Health implements Source. Lag is the longer of how long the oldest fetched message has waited for its
// Redis write (a stalled chain) and how long the group's oldest unread record may have waited (a
// consumer behind, whichever member's partition it is on). Blind is set while a rebalance's partitions
// are not read past its start yet, or while the group cannot be observed.
func (s *KafkaSource) Health() Health {
	now := s.opts.Now() // the clock add was given
	lag := s.offsets.lag(now)
	glag, blind, why := s.watch.status(now, s.staleAfter())
	h := s.health.health(max(lag, glag))
	h.Blind, h.BlindWhy, h.Kept, h.BlindShared = blind, why, true, true
	h.OwnLag = lag
	if since := s.unassignedSince.Load(); since != 0 {
		unassigned := now.Sub(time.Unix(0, since))
		if s.rebalancing.Load() {
			// Between two generations the group waits up to its rebalance timeout for every member (a
			// dead one included): a replica is not behind for taking part in that.
			unassigned -= s.opts.RebalanceTimeout
		}
		h.OwnLag = max(h.OwnLag, unassigned)
	} else if own := s.own.Load(); own != nil {
		// A backlog inherited with a partition (a dead member's share) is not this replica's delay:
		// it answers for a record's wait from the moment it was given the partition.
		h.OwnLag = max(h.OwnLag, min(s.watch.lagOf(own.parts, now), now.Sub(own.at)))
	}
	return h
}

// assignment is the partitions one generation gave this replica and when it got them.
type assignment struct {
	parts []topicPartition
	at    time.Time
}

// assigned records gen's assignment as this replica's own share until gen ends.
func (s *KafkaSource) assigned(gen *kafka.Generation) {
	own := &assignment{at: s.opts.Now()}
	for topic, parts := range gen.Assignments {
		for _, p := range parts {
			own.parts = append(own.parts, topicPartition{topic, p.ID})
		}
	}
	s.own.Store(own)
	s.unassignedSince.Store(0)
	gen.Start(func(genCtx context.Context) {
		<-genCtx.Done()
		s.own.Store(nil)
		s.rebalancing.Store(true)
		s.unassignedSince.Store(s.opts.Now().UnixNano())
	})
}

// staleAfter is how long the group may go unobserved before the source stops vouching for it: a few
// missed observations, not one slow round trip.
func (s *KafkaSource) staleAfter() time.Duration { return max(4*s.opts.WatchInterval, 5*time.Second) }
