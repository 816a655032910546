// Package lease is heartbeatd's one Redis lease: a key held by one holder for a while, taken when free or
// lapsed, renewed by its holder, given up only by its holder. Slot ownership (internal/scan/ownership.go)
// holds one per slot, the correlator (internal/correlate/correlator.go) one for the replica that ends outages.
//
// A lease only keeps two replicas from doing the same work at once; nothing relies on it for correctness.
package lease

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Script takes or renews the lease on KEYS[1] for holder ARGV[1] for ARGV[2] ms, or releases it when
// ARGV[2] is 0 (build the arguments with TakeArgs and ReleaseArgs). Reply: 1 when the holder holds the
// lease afterwards (take, renew) or gave it up (release); 0 when another holder has it.
//
// Exported for callers that pipeline many leases with their own NOSCRIPT handling
// (replicaset.Set.LeaseSlots); one lease at a time goes through Lease.
var Script = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if ARGV[2] == '0' then
  if cur == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end
  return 0
end
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
`)

// TakeArgs are Script's arguments to take or renew a lease for ttl. A ttl under a millisecond counts as
// one: 0 would release it.
func TakeArgs(holder string, ttl time.Duration) []any {
	return []any{holder, strconv.FormatInt(max(ttl.Milliseconds(), 1), 10)}
}

// ReleaseArgs are Script's arguments to give a lease up.
func ReleaseArgs(holder string) []any { return []any{holder, "0"} }

// Held reads a reply of Script: true when the holder holds the lease (take, renew) or gave it up.
func Held(cmd *redis.Cmd) (bool, error) {
	n, err := cmd.Int()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// Lease is Holder's lease on Key.
type Lease struct {
	Key    string
	Holder string
}

// Take takes the lease for ttl when it is free, or renews it when Holder has it; it reports whether
// Holder holds it now.
func (l Lease) Take(ctx context.Context, rdb redis.Scripter, ttl time.Duration) (bool, error) {
	return Held(Script.Run(ctx, rdb, []string{l.Key}, TakeArgs(l.Holder, ttl)...))
}

// Release gives the lease up when Holder has it, so another holder can take it at once rather than
// after it lapses; it reports whether Holder had it.
func (l Lease) Release(ctx context.Context, rdb redis.Scripter) (bool, error) {
	return Held(Script.Run(ctx, rdb, []string{l.Key}, ReleaseArgs(l.Holder)...))
}
