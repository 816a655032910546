package deadline

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/overrides"
	"github.com/heartbeatd/heartbeatd/internal/parents"
	"github.com/heartbeatd/heartbeatd/internal/typeindex"
)

// The device registry (docs/http-api.md, "Device registry"): devices an operator expects, with an optional
// type, per-device timeout, parent and labels. Like the parent links it lives apart from the slots, and a
// device that is not registered pays nothing on the signal path:
//
//   - the registry's entries: each registered device with its labels (internal/registry);
//   - the per-device timeouts: each such device's own timeout type name (internal/overrides). Each
//     replica keeps the table in memory (SyncOverrides) and records a signal of such a device under
//     that name, so its deadline is the signal time + its own timeout, whatever type the signal names.

// Registration is one device's registration. The registry keeps its labels; its type is folded into its
// deadline and its own timeout is in the overrides table, so neither is stored twice.
type Registration struct {
	Type      string
	TimeoutMs int64 // 0: the type's
	Labels    map[string]string
}

// expectScript puts registered devices that Redis knows nothing of into a slot's deadlines set, so they
// alarm at their deadlines if they never signal; a device already known (a deadline, an open incident) is
// left as it is: its next signal applies the registration. Two commands per 500 devices (HMGET of the
// open incidents, ZADD NX of the others), not three per device.
//
// KEYS[1] deadlines  KEYS[2] state  ARGV: pairs device, score
// Reply: how many devices were added.
var expectScript = newScript(`
local added = 0
for from = 1, #ARGV, 1000 do
  local to = math.min(from + 999, #ARGV)
  local ids = {}
  for i = from, to, 2 do ids[#ids + 1] = ARGV[i] end
  local open = redis.call('HMGET', KEYS[2], unpack(ids))
  local zadd = {}
  for j = 1, #ids do
    if not open[j] then
      zadd[#zadd + 1] = ARGV[from + 2 * j - 1]
      zadd[#zadd + 1] = ids[j]
    end
  end
  if #zadd > 0 then added = added + redis.call('ZADD', KEYS[1], 'NX', unpack(zadd)) end
end
return added`)

// Register records devices' registrations in bulk, one round trip per call after the per-device types are
// known: their registry entries, parent links and per-device timeouts, and a deadline for each device
// Redis knew nothing of: the one a signal now would set (now + timeout, or a scheduled type's next
// expected time + grace). parentIDs[i] is device i's parent ("" leaves its link alone). It
// returns how many devices were new to Redis (expected from now on), and the indexes of the
// registrations refused, nothing of them written, because their own timeout needs a type index and
// every one is taken (ErrTypesFull): one such row never stops the others.
func (s *Store) Register(ctx context.Context, devices []string, regs []Registration, parentIDs []string) (added int, refused []int, err error) {
	if len(devices) == 0 {
		return 0, nil, nil
	}
	now := s.now()
	l := s.layouts.Load()
	ownTimeouts := s.overrides.Current()
	pipe := s.rdb.Pipeline()
	bySlot := map[int][]any{}
	changed := false
	var links []parents.Write
	for i, dev := range devices {
		reg := regs[i]
		name := typeindex.OwnTypeName(reg.Type, time.Duration(reg.TimeoutMs)*time.Millisecond)
		idx, err := s.typeIndexFor(ctx, name, reg.TimeoutMs > 0)
		if errors.Is(err, ErrTypesFull) {
			refused = append(refused, i)
			continue
		} else if err != nil {
			return 0, nil, err
		}
		if err := s.registry.Queue(ctx, pipe, dev, reg.Labels); err != nil {
			return 0, nil, fmt.Errorf("deadline: register %q: %w", dev, err)
		}
		if p := parentIDs[i]; p != "" {
			links = append(links, s.links.QueueLink(ctx, pipe, dev, p))
			s.links.Forget(dev)
		}
		if reg.TimeoutMs > 0 {
			s.overrides.QueueSet(ctx, pipe, dev, name)
			changed = true
		} else if ownTimeouts[dev] != "" { // an override removed
			s.overrides.QueueRemove(ctx, pipe, dev)
			changed = true
		}
		slot := Slot(dev, l.Slots)
		dl, scheduled := s.deadlineOf(name, now) // a scheduled type's next expected time + grace, not a timeout
		score := strconv.FormatInt(dl*MaxTypes+int64(idx), 10)
		bySlot[slot] = append(bySlot[slot], dev, score)
		if scheduled {
			// Its last_seen, as for any registered device that never signalled, is when it was registered
			// (deadline − timeout would be a time the schedule made up); a signal recorded before stays.
			pipe.ZAddNX(ctx, s.keys.seen(slot), redis.Z{Score: float64(now.UnixMilli()), Member: dev})
		}
	}
	if changed {
		s.overrides.QueueChanged(ctx, pipe)
	}
	if len(links) > 0 {
		s.links.QueueInUse(ctx, pipe)
	}
	if len(bySlot) == 0 {
		return 0, refused, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, nil, fmt.Errorf("deadline: register: %w", err)
	}
	if len(links) > 0 {
		s.links.MarkUsed()
		// A registered parent replaces the one the device named before: it leaves that one's children.
		if err := s.links.Unlink(ctx, links, nil); err != nil {
			return 0, nil, fmt.Errorf("deadline: register: %w", err)
		}
	}
	if changed {
		if err := s.SyncOverrides(ctx); err != nil {
			return 0, nil, err
		}
	}
	// After the registry: a device expected from now on has its registration to alarm with.
	calls := make([]scriptCall, 0, len(bySlot))
	for slot, args := range bySlot {
		calls = append(calls, scriptCall{Keys: []string{s.keys.Deadlines(slot), s.keys.state(slot)}, Args: args})
	}
	cmds, err := s.runAll(ctx, expectScript, calls)
	if err != nil {
		return 0, nil, fmt.Errorf("deadline: register: %w", err)
	}
	for _, c := range cmds {
		n, _ := c.Int()
		added += n
	}
	return added, refused, nil
}

// typeIndexFor is the type index a registration records; a per-device timeout name is registered first.
// A full registry is reclaimed (typereclaim.go, internal/typeindex) and asked once more.
func (s *Store) typeIndexFor(ctx context.Context, name string, perDevice bool) (int, error) {
	if !perDevice {
		return s.typeIndex(ctx, name)
	}
	i, err := s.types.Allow(ctx, name, AsStored(s.lead(name)))
	if errors.Is(err, ErrTypesFull) {
		if freed, rerr := s.maybeReclaimTypes(ctx, true); rerr != nil {
			return 0, rerr
		} else if freed > 0 {
			i, err = s.types.Allow(ctx, name, AsStored(s.lead(name)))
		}
	}
	return i, err
}

// SyncOverrides reads the per-device timeout table (internal/overrides) when its version in Redis moved
// since the last read, registering its names in the type registry first. The daemon calls it every few
// seconds; a registration applies on every replica within that long. After a data loss it first writes
// back the table it holds, once the type registry is. It then follows the type registry's version and
// reclaims unused type indexes when that is due (typereclaim.go).
func (s *Store) SyncOverrides(ctx context.Context) error {
	err := s.overrides.Sync(ctx, overrides.Hooks{
		CheckLost: func(ctx context.Context) error {
			_, err := s.CheckDataLost(ctx)
			return err
		},
		BeforeRestore: s.payTypes,
		Allow: func(ctx context.Context, name string) error {
			_, err := s.types.Allow(ctx, name, AsStored(s.lead(name)))
			return err
		},
	})
	if err != nil {
		return err
	}
	if err := s.syncTypes(ctx, false); err != nil {
		return err
	}
	_, err = s.maybeReclaimTypes(ctx, false)
	return err
}

// applyOverrides records the signals of devices with their own timeout under its name. A fleet without
// any pays one atomic load per batch.
func (s *Store) applyOverrides(signals []Signal) {
	byDev := s.overrides.Current()
	if len(byDev) == 0 {
		return
	}
	for i := range signals {
		if name, ok := byDev[signals[i].Device]; ok {
			signals[i].Type = name
		}
	}
}
