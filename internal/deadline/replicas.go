package deadline

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/lease"
)

// The replica set and the slot leases are what slot ownership (internal/scan) keeps: each replica marks
// itself alive in the replica set, and holds a lease (internal/lease) on each slot it wins.

// JoinReplicas marks replica alive at now in the replica set, drops the replicas silent for aliveFor,
// and returns the live ones: one round trip.
func (s *Store) JoinReplicas(ctx context.Context, replica string, now time.Time, aliveFor time.Duration) ([]string, error) {
	ms := now.UnixMilli()
	pipe := s.rdb.Pipeline()
	pipe.ZAdd(ctx, s.keys.Replicas(), redis.Z{Score: float64(ms), Member: replica})
	pipe.ZRemRangeByScore(ctx, s.keys.Replicas(), "-inf", strconv.FormatInt(ms-aliveFor.Milliseconds(), 10))
	live := pipe.ZRange(ctx, s.keys.Replicas(), 0, -1)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("deadline: ownership heartbeat: %w", err)
	}
	return live.Val(), nil
}

// LeaveReplicas takes replica out of the replica set, so the others take its slots at their next
// heartbeat.
func (s *Store) LeaveReplicas(ctx context.Context, replica string) error {
	if err := s.rdb.ZRem(ctx, s.keys.Replicas(), replica).Err(); err != nil {
		return fmt.Errorf("deadline: leave the replica set: %w", err)
	}
	return nil
}

// LeaseSlots takes or renews replica's lease on each slot of take for ttl and gives up its lease on each
// slot of release, in one pipeline; it returns whether replica holds each slot of take.
func (s *Store) LeaseSlots(ctx context.Context, replica string, take, release []int, ttl time.Duration) ([]bool, error) {
	calls := make([]scriptCall, 0, len(take)+len(release))
	for _, slot := range take {
		calls = append(calls, scriptCall{Keys: []string{s.keys.Owner(slot)}, Args: lease.TakeArgs(replica, ttl)})
	}
	for _, slot := range release {
		calls = append(calls, scriptCall{Keys: []string{s.keys.Owner(slot)}, Args: lease.ReleaseArgs(replica)})
	}
	if len(calls) == 0 {
		return nil, nil
	}
	cmds, err := s.runAll(ctx, lease.Script, calls)
	if err != nil {
		return nil, fmt.Errorf("deadline: slot leases: %w", err)
	}
	held := make([]bool, len(take))
	for i := range take {
		held[i], _ = lease.Held(cmds[i])
	}
	return held, nil
}
