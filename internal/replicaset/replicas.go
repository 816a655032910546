package replicaset

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/lease"
	"github.com/heartbeatd/heartbeatd/internal/redisutil"
)

// Set is the replica set and the slot leases on one Redis (standalone or Cluster).
type Set struct {
	rdb  redis.UniversalClient
	keys keyspace
}

// New returns the set on rdb under prefix (config redis.key_prefix; "" = its default).
func New(rdb redis.UniversalClient, prefix string) *Set {
	return &Set{rdb: rdb, keys: newKeyspace(prefix)}
}

// Live is the replica set as one replica's heartbeat found it.
type Live struct {
	// Replicas are the live replicas' ids, in order.
	Replicas []string
	// NextLapse is when the first other replica drops out unless it beats again (its last mark plus
	// aliveFor), so ownership can look again right then rather than at its next heartbeat; zero when no
	// other replica is live.
	NextLapse time.Time
}

// Join marks replica alive at now in the replica set, drops the replicas silent for aliveFor,
// and returns the live ones: one round trip.
func (s *Set) Join(ctx context.Context, replica string, now time.Time, aliveFor time.Duration) (Live, error) {
	ms := now.UnixMilli()
	pipe := s.rdb.Pipeline()
	pipe.ZAdd(ctx, s.keys.replicas(), redis.Z{Score: float64(ms), Member: replica})
	pipe.ZRemRangeByScore(ctx, s.keys.replicas(), "-inf", strconv.FormatInt(ms-aliveFor.Milliseconds(), 10))
	marks := pipe.ZRangeWithScores(ctx, s.keys.replicas(), 0, -1)
	if _, err := pipe.Exec(ctx); err != nil {
		return Live{}, fmt.Errorf("replicaset: ownership heartbeat: %w", err)
	}
	var live Live
	for _, m := range marks.Val() {
		id, _ := m.Member.(string)
		live.Replicas = append(live.Replicas, id)
		if lapse := time.UnixMilli(int64(m.Score)).Add(aliveFor); id != replica && (live.NextLapse.IsZero() || lapse.Before(live.NextLapse)) {
			live.NextLapse = lapse
		}
	}
	return live, nil
}

// Leave takes replica out of the replica set, so the others take its slots at their next
// heartbeat.
func (s *Set) Leave(ctx context.Context, replica string) error {
	if err := s.rdb.ZRem(ctx, s.keys.replicas(), replica).Err(); err != nil {
		return fmt.Errorf("replicaset: leave the replica set: %w", err)
	}
	return nil
}

// LeaseSlots takes or renews replica's lease on each slot of take for ttl and gives up its lease on each
// slot of release, in one pipeline; it returns whether replica holds each slot of take.
func (s *Set) LeaseSlots(ctx context.Context, replica string, take, release []int, ttl time.Duration) ([]bool, error) {
	calls := make([]redisutil.ScriptCall, 0, len(take)+len(release))
	for _, slot := range take {
		calls = append(calls, redisutil.ScriptCall{Keys: []string{s.keys.owner(slot)}, Args: lease.TakeArgs(replica, ttl)})
	}
	for _, slot := range release {
		calls = append(calls, redisutil.ScriptCall{Keys: []string{s.keys.owner(slot)}, Args: lease.ReleaseArgs(replica)})
	}
	if len(calls) == 0 {
		return nil, nil
	}
	cmds, err := redisutil.RunAll(ctx, s.rdb, lease.Script, calls)
	if err != nil {
		return nil, fmt.Errorf("replicaset: slot leases: %w", err)
	}
	held := make([]bool, len(take))
	for i := range take {
		held[i], _ = lease.Held(cmds[i])
	}
	return held, nil
}
