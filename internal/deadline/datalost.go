package deadline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Redis that lost heartbeatd's data (a restart without persistence, a failover to a replica that had
// not caught up, a flush) comes back empty, and nothing on the signal path would notice: signals simply
// write new deadlines. Each store notices it at its next layout read (every ownership heartbeat), because
// the re-created layout carries a new epoch. On Redis Cluster one master can lose its data alone, so
// every slot keeps a marker of the epoch on its own master: the first store to find one gone counts a
// loss in the layout, and every other store counts it at its next read. Then what the store remembers
// having written is wrong:
//   - parent links it remembers are written again by each child's next signal, not 10 minutes later, so
//     a gateway that falls silent after the loss is still one event and not a storm of its children;
//   - the type names it knows go back into the registry under the indexes the scores already use, so a
//     replica that starts after the loss gives no name another index;
//   - the per-device timeouts it applies go back into their table (SyncOverrides), so a device with a
//     longer timeout than its type's is not reported at its type's deadline.
//
// The types it remembers per device stay: an untyped signal keeps its device's type, and its write
// records the type in Redis again. The silences go back too (internal/silence, Silences.Load). What Redis alone held
// (devices silent since before the loss, open incidents, registrations as such, parked events) is gone;
// DataLost lets the daemon say so.

// dataLoss counts the losses a store noticed.
type dataLoss struct {
	count atomic.Int64
	last  atomic.Int64 // unix ms of the last one noticed
	// typesOwed is set while the type registry has not been written back since the last loss.
	typesOwed atomic.Bool

	mu     sync.Mutex // one layout read at a time follows the losses
	losses int64      // the layout's losses field as this store last accounted for it
}

// DataLost returns how many times this store found Redis without the data it had written, and when it
// last did (zero time: never).
func (s *Store) DataLost() (int64, time.Time) {
	n := s.lost.count.Load()
	if n == 0 {
		return 0, time.Time{}
	}
	return n, time.UnixMilli(s.lost.last.Load())
}

// CheckDataLost reads the layout again and returns DataLost's count: for a caller that found less in
// Redis than it knew, to tell a deletion from a loss the heartbeat has not noticed yet.
func (s *Store) CheckDataLost(ctx context.Context) (int64, error) {
	if _, err := s.RefreshLayout(ctx); err != nil {
		return 0, err
	}
	n, _ := s.DataLost()
	return n, nil
}

// followLosses counts a loss when the layout read l shows one the read before did not: a new epoch,
// or a loss another store counted in the layout. It then checks the slots' markers and counts, once
// for the fleet, the loss of a master whose markers are gone.
func (s *Store) followLosses(ctx context.Context, before, l Layout) {
	s.lost.mu.Lock()
	defer s.lost.mu.Unlock()
	first, renewed := before.Epoch == "", before.Epoch != "" && before.Epoch != l.Epoch
	counted := renewed || (!first && l.Losses > s.lost.losses)
	if first || renewed {
		s.lost.losses = 0 // the count of another layout says nothing of this one
	}
	s.lost.losses = max(s.lost.losses, l.Losses)
	if counted {
		s.dataLost()
	}
	// The markers of slots this store has not seen under this epoch are written, not missed: the first
	// read, a new epoch, the slots a doubling added.
	known := 0
	if !first && !renewed {
		known = max(before.Slots, before.Previous)
	}
	if s.markSlots(ctx, l, known) == 0 || counted {
		return
	}
	n, err := countLossScript.Run(ctx, s.rdb, []string{s.keys.Layout()}, l.Epoch).Int64()
	if err != nil || n < 0 {
		return // the layout changed meanwhile (its own loss, counted at the next read) or Redis failed
	}
	s.lost.losses = max(s.lost.losses, n)
	s.dataLost()
}

// markScript writes the layout's epoch into a slot's marker.
//
// KEYS[1] the slot's marker  ARGV[1] epoch
// Reply: 1 when it wrote the marker, 0 when the marker held the epoch already.
var markScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1
`)

// countLossScript counts a loss in the layout if it still has epoch ARGV[1].
//
// KEYS[1] layout hash  ARGV[1] epoch
// Reply: the losses counted, or -1 when the layout has another epoch or none.
var countLossScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then return -1 end
return redis.call('HINCRBY', KEYS[1], 'losses', 1)
`)

// markSlots writes the epoch into every slot marker that lacks it and returns how many of those below
// known it wrote: markers that were there before, so their master lost its data. A master that does
// not answer is left for the next read: the signal and claim paths report it, and the layout read must
// not fail for it (every replica would then let go of every slot).
func (s *Store) markSlots(ctx context.Context, l Layout, known int) int {
	pipe := s.rdb.Pipeline()
	n := max(l.Slots, l.Previous)
	marks := make([]*redis.StringCmd, n)
	for slot := range n {
		marks[slot] = pipe.Get(ctx, s.keys.epoch(slot))
	}
	_, _ = pipe.Exec(ctx)
	var calls []scriptCall
	var slots []int
	for slot, m := range marks {
		v, err := m.Result()
		if (err == nil && v != l.Epoch) || errors.Is(err, redis.Nil) {
			calls = append(calls, scriptCall{Keys: []string{s.keys.epoch(slot)}, Args: []any{l.Epoch}})
			slots = append(slots, slot)
		}
	}
	if len(calls) == 0 {
		return 0
	}
	cmds, _ := s.runAll(ctx, markScript, calls)
	gone := 0
	for i, c := range cmds {
		if wrote, err := c.Int(); err == nil && wrote == 1 && slots[i] < known {
			gone++
		}
	}
	return gone
}

// dataLost forgets what the store remembers having written and owes the type registry its names.
func (s *Store) dataLost() {
	s.lost.last.Store(s.now().UnixMilli())
	s.lost.count.Add(1)
	s.links.ForgetAll()
	s.views.ForgetAll()
	s.lost.typesOwed.Store(true)
	s.overrides.MarkLost()
}

// payTypes writes the type registry back while it is owed, at each layout read until it succeeds: a
// registration before it would give a lost name a new index, where the scores carry the old one.
func (s *Store) payTypes(ctx context.Context) error {
	if !s.lost.typesOwed.Load() {
		return nil
	}
	if err := s.types.Restore(ctx); err != nil {
		return err
	}
	s.lost.typesOwed.Store(false)
	return nil
}

// newEpoch draws the epoch a new layout is written with.
func newEpoch() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail (Go 1.24)
	return hex.EncodeToString(b[:])
}
