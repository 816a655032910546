package deadline

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/loop"
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
//     cache when it sees the version move (SyncOverrides, every few seconds) and forgets the types it
//     remembered. The mark stays, so no name takes the index yet;
//   - release: still unused, the mark goes, and the index is free to take: by then every replica has
//     stopped resolving the old name to it.
//
// A reclaim costs one ZSCAN and one HSCAN of every slot, so it runs only while the registry is at least
// half full (from SyncOverrides) or a registration found it full, and at most every typeReclaimEvery
// across the replicas (the registry's reclaim field).

// typeQuarantine is how long a retired index keeps its name before a reclaim may free it.
const typeQuarantine = time.Minute

// typeReclaimEvery is the least time between two reclaims across the replicas.
const typeReclaimEvery = time.Minute

// typeReclaimAt is how many registered names make the registry worth a reclaim.
const typeReclaimAt = MaxTypes / 2

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

// maybeReclaimTypes reclaims when the registry is at least typeReclaimAt full (always when full) and no
// replica did for typeReclaimEvery. It returns how many indexes it released (free to take now).
func (s *Store) maybeReclaimTypes(ctx context.Context, full bool) (int, error) {
	if !full && s.types.count() < typeReclaimAt {
		return 0, nil
	}
	now := s.now()
	ok, err := reclaimTurnScript.Run(ctx, s.rdb, []string{s.keys.Types()}, now.UnixMilli(), now.Add(typeReclaimEvery).UnixMilli()).Int()
	if err != nil {
		return 0, fmt.Errorf("deadline: reclaim type indexes: %w", err)
	}
	if ok == 0 {
		return 0, nil
	}
	return s.reclaimTypes(ctx)
}

// reclaimTypes scans the slots for the type indexes in use, then takes each index's next step (above).
// It returns how many indexes it released.
func (s *Store) reclaimTypes(ctx context.Context) (int, error) {
	began := s.now()
	used, err := s.typesInUse(ctx)
	if err != nil {
		return 0, err
	}
	all, err := s.rdb.HGetAll(ctx, s.keys.Types()).Result()
	if err != nil {
		return 0, fmt.Errorf("deadline: reclaim type indexes: %w", err)
	}
	written, err := s.writtenIndexes(ctx)
	if err != nil {
		return 0, err
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
		return 0, nil
	}
	res, err := retireTypesScript.Run(ctx, s.rdb, []string{s.keys.Types()}, args...).Int64Slice()
	if err != nil || len(res) != 2 {
		return 0, fmt.Errorf("deadline: reclaim type indexes: %w (reply %v)", err, res)
	}
	if res[0] > 0 {
		err = s.syncTypes(ctx, true)
	}
	return int(res[1]), err
}

// typesInUse scans every slot's deadlines set, then its state hash, for the type indexes their scores
// and states hold: in that order, so a device a claim moves from one to the other meanwhile is seen.
func (s *Store) typesInUse(ctx context.Context) ([MaxTypes]bool, error) {
	var used [MaxTypes]bool
	for slot := range s.Slots() {
		err := s.scanSlot(ctx, slot, false, loop.Pacer{}, func(_, v string) {
			score, _ := strconv.ParseFloat(v, 64)
			_, idx := scoreDeadline(score)
			used[idx%MaxTypes] = true
		})
		if err == nil {
			err = s.scanSlot(ctx, slot, true, loop.Pacer{}, func(field, v string) {
				if st, err := decodeState(v); err == nil && field != stateGuardField {
					used[st.TypeIndex%MaxTypes] = true
				}
			})
		}
		if err != nil {
			return used, fmt.Errorf("deadline: reclaim type indexes: %w", err)
		}
	}
	return used, nil
}

// writtenIndexes are the indexes this replica writes new scores with: the configured types' and the
// per-device timeouts' under their current leads.
func (s *Store) writtenIndexes(ctx context.Context) (map[int]bool, error) {
	names := s.types.configuredNames()
	if t := s.perDevice.table.Load(); t != nil {
		for _, name := range t.byDev {
			names = append(names, name)
		}
	}
	out := map[int]bool{0: true}
	for _, name := range names {
		r, err := s.resolve(ctx, name)
		if err != nil {
			return nil, err
		}
		out[r.idx] = true
	}
	return out, nil
}

// syncTypes rebuilds the registry's cache when its version in Redis moved (or always, when force), and
// then forgets the types the store remembered: a freed index may name another type from now on.
func (s *Store) syncTypes(ctx context.Context, force bool) error {
	v, err := s.rdb.HGet(ctx, s.keys.Types(), typeVersionField).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("deadline: type registry version: %w", err)
	}
	if !force && v == s.types.version.Load() {
		return nil
	}
	if err := s.types.rebuild(ctx, v); err != nil {
		return err
	}
	s.typeMem.forgetAll()
	return nil
}
