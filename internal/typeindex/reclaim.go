package typeindex

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Type indexes are freed when no score or state uses them any more: a per-device timeout whose devices
// were deleted or registered again with another, a type whose timeout changed and whose devices all
// signalled since, a type no longer configured. No script counts devices per index (the signal path
// writes typed scores without one); instead a reclaim scans every slot's deadlines set and state hash
// for the indexes in use, then takes one step per index, guarded in one script over the registry hash,
// each step at least typeQuarantine after the one before:
//
//   - retire: an index no scan found, whose name this replica does not write with (the configured types
//     under their current timeout, the per-device timeouts of the overrides table, index 0), is marked
//     retired: its name still resolves, so a writer that did not hear of a change yet (a replica not
//     reloaded, an overrides table a sync old) still has its scores read right. One found in use again
//     loses its mark;
//   - free: still unused, its name goes and the registry's version counts up; each replica rebuilds its
//     cache when it sees the version move (Sync, from deadline.Store.SyncOverrides every few seconds)
//     and forgets the types it remembered. The mark stays, so no name takes the index yet;
//   - release: still unused, the mark goes, and the index is free to take: by then every replica has
//     stopped resolving the old name to it.
//
// The scan is internal/deadline's (it reads the slots); the steps are Retire's. A reclaim costs one ZSCAN
// and one HSCAN of every slot, so it runs only while the registry is at least half full (ReclaimAt; from
// SyncOverrides) or a registration found it full, and at most every typeReclaimEvery across the replicas
// (the registry's reclaim field, TakeReclaimTurn).

// typeQuarantine is how long a retired index keeps its name before a reclaim may free it.
const typeQuarantine = time.Minute

// typeReclaimEvery is the least time between two reclaims across the replicas.
const typeReclaimEvery = time.Minute

// ReclaimAt is how many registered names make the registry worth a reclaim (see Count).
const ReclaimAt = MaxTypes / 2

// Fields of the registry hash that are not type names: they start with a NUL, which no name holds.
const (
	typeFieldMark    = "\x00"
	typeRetiredField = typeFieldMark + "retired" + timedSep // + index → when it was retired (ms)
	typeVersionField = typeFieldMark + "version"            // → releases so far
	typeReclaimField = typeFieldMark + "reclaim"            // → when the next reclaim may start (ms)
)

// reclaimTurnScript takes the reclaim's turn when it is due: it sets the next one typeReclaimEvery on.
// KEYS[1] registry  ARGV[1] now (ms)  ARGV[2] the next turn (ms)  Reply: 1 when the turn is taken.
var reclaimTurnScript = newScript(`
local at = tonumber(redis.call('HGET', KEYS[1], ${typeReclaimField}) or '0')
if at > tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], ${typeReclaimField}, ARGV[2])
return 1`)

// retireTypesScript applies a reclaim's steps: retire, unmark and free only while the name still holds
// its index, free and release only a mark set at or before ARGV[2].
// KEYS[1] registry  ARGV[1] now (ms)  ARGV[2] the latest mark time a step may follow (ms)
// then triples: op ("retire", "unmark", "free", "release"), name ("" to release), index.
// Reply: {indexes freed, indexes released}.
var retireTypesScript = newScript(`
local freed, released = 0, 0
for i = 3, #ARGV, 3 do
  local op, name, idx = ARGV[i], ARGV[i+1], ARGV[i+2]
  local mark = ${typeRetiredField} .. idx
  local since = tonumber(redis.call('HGET', KEYS[1], mark) or 'inf')
  if op == 'release' then
    if since <= tonumber(ARGV[2]) then
      redis.call('HDEL', KEYS[1], mark)
      released = released + 1
    end
  elseif redis.call('HGET', KEYS[1], name) == idx then
    if op == 'retire' then
      redis.call('HSETNX', KEYS[1], mark, ARGV[1])
    elseif op == 'unmark' then
      redis.call('HDEL', KEYS[1], mark)
    elseif since <= tonumber(ARGV[2]) then
      redis.call('HDEL', KEYS[1], name)
      redis.call('HSET', KEYS[1], mark, ARGV[1])
      freed = freed + 1
    end
  end
end
if freed > 0 then redis.call('HINCRBY', KEYS[1], ${typeVersionField}, 1) end
return {freed, released}`)

// TakeReclaimTurn takes the reclaim's turn when no replica took it for typeReclaimEvery; it reports
// whether this replica reclaims now.
func (r *Registry) TakeReclaimTurn(ctx context.Context, now time.Time) (bool, error) {
	ok, err := reclaimTurnScript.Run(ctx, r.rdb, []string{r.key}, now.UnixMilli(), now.Add(typeReclaimEvery).UnixMilli()).Int()
	if err != nil {
		return false, fmt.Errorf("deadline: reclaim type indexes: %w", err)
	}
	return ok == 1, nil
}

// Retire takes each index's next step (above) as of began, when the reclaim's scan of the slots began:
// used are the indexes the slots' scores and states hold, written those this replica writes new scores
// with. It returns how many indexes it freed and how many it released.
func (r *Registry) Retire(ctx context.Context, began time.Time, used *[MaxTypes]bool, written map[int]bool) (freed, released int, err error) {
	all, err := r.rdb.HGetAll(ctx, r.key).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("deadline: reclaim type indexes: %w", err)
	}
	args := []any{began.UnixMilli(), began.Add(-typeQuarantine).UnixMilli()}
	named := map[string]bool{} // indexes a name holds
	for name, v := range all {
		idx, err := strconv.Atoi(v)
		if err != nil || strings.HasPrefix(name, typeFieldMark) || idx == 0 {
			continue
		}
		named[v] = true
		_, marked := all[typeRetiredField+v]
		switch {
		case used[idx] || written[idx]:
			if marked {
				args = append(args, "unmark", name, v)
			}
		case marked:
			args = append(args, "free", name, v)
		default:
			args = append(args, "retire", name, v)
		}
	}
	for field := range all {
		v, isMark := strings.CutPrefix(field, typeRetiredField)
		if idx, err := strconv.Atoi(v); isMark && err == nil && !named[v] && idx > 0 && idx < MaxTypes && !used[idx] {
			args = append(args, "release", "", v)
		}
	}
	if len(args) == 2 {
		return 0, 0, nil
	}
	res, err := retireTypesScript.Run(ctx, r.rdb, []string{r.key}, args...).Int64Slice()
	if err != nil || len(res) != 2 {
		return 0, 0, fmt.Errorf("deadline: reclaim type indexes: %w (reply %v)", err, res)
	}
	return int(res[0]), int(res[1]), nil
}

// Sync rebuilds the cache when the registry's version in Redis moved (or always, when force); it reports
// whether it did: a freed index may name another type from then on.
func (r *Registry) Sync(ctx context.Context, force bool) (rebuilt bool, err error) {
	v, err := r.rdb.HGet(ctx, r.key, typeVersionField).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, fmt.Errorf("deadline: type registry version: %w", err)
	}
	if !force && v == r.version.Load() {
		return false, nil
	}
	if err := r.rebuild(ctx, v); err != nil {
		return false, err
	}
	return true, nil
}
