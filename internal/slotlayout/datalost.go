package slotlayout

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/redisutil"
)

// A Redis that lost heartbeatd's data (a restart without persistence, a failover to a replica that had
// not caught up, a flush) comes back empty, and nothing on the signal path would notice: signals simply
// write new deadlines. Each tracker notices it at its next layout read (every ownership heartbeat),
// because the re-created layout carries a new epoch. On Redis Cluster one master can lose its data alone,
// so every slot keeps a marker of the epoch on its own master: the first tracker to find one gone counts
// a loss in the layout, and every other tracker counts it at its next read. Each loss runs the tracker's
// onLoss, and DataLost lets the daemon say what Redis alone held is gone.

// dataLoss counts the losses a tracker noticed.
type dataLoss struct {
	count atomic.Int64
	last  atomic.Int64 // unix ms of the last one noticed

	mu     sync.Mutex // one layout read at a time follows the losses
	losses int64      // the layout's losses field as this tracker last accounted for it
}

// DataLost returns how many times this tracker found Redis without the data it had written, and when it
// last did (zero time: never).
func (t *Tracker) DataLost() (int64, time.Time) {
	n := t.lost.count.Load()
	if n == 0 {
		return 0, time.Time{}
	}
	return n, time.UnixMilli(t.lost.last.Load())
}

// CheckDataLost reads the layout again and returns DataLost's count: for a caller that found less in
// Redis than it knew, to tell a deletion from a loss the heartbeat has not noticed yet.
func (t *Tracker) CheckDataLost(ctx context.Context) (int64, error) {
	if _, err := t.Refresh(ctx); err != nil {
		return 0, err
	}
	n, _ := t.DataLost()
	return n, nil
}

// NoteLoss counts a loss found some other way and runs onLoss.
func (t *Tracker) NoteLoss() {
	t.lost.last.Store(t.now().UnixMilli())
	t.lost.count.Add(1)
	t.onLoss()
}

// followLosses counts a loss when the layout read l shows one the read before did not: a new epoch,
// or a loss another tracker counted in the layout. It then checks the slots' markers and counts, once
// for the fleet, the loss of a master whose markers are gone.
func (t *Tracker) followLosses(ctx context.Context, before, l Layout) {
	t.lost.mu.Lock()
	defer t.lost.mu.Unlock()
	first, renewed := before.Epoch == "", before.Epoch != "" && before.Epoch != l.Epoch
	counted := renewed || (!first && l.Losses > t.lost.losses)
	if first || renewed {
		t.lost.losses = 0 // the count of another layout says nothing of this one
	}
	t.lost.losses = max(t.lost.losses, l.Losses)
	if counted {
		t.NoteLoss()
	}
	// The markers of slots this tracker has not seen under this epoch are written, not missed: the first
	// read, a new epoch, the slots a doubling added.
	known := 0
	if !first && !renewed {
		known = max(before.Slots, before.Previous)
	}
	if t.markSlots(ctx, l, known) == 0 || counted {
		return
	}
	n, err := countLossScript.Run(ctx, t.rdb, []string{t.keys.layout()}, l.Epoch).Int64()
	if err != nil || n < 0 {
		return // the layout changed meanwhile (its own loss, counted at the next read) or Redis failed
	}
	t.lost.losses = max(t.lost.losses, n)
	t.NoteLoss()
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
func (t *Tracker) markSlots(ctx context.Context, l Layout, known int) int {
	pipe := t.rdb.Pipeline()
	n := max(l.Slots, l.Previous)
	marks := make([]*redis.StringCmd, n)
	for slot := range n {
		marks[slot] = pipe.Get(ctx, t.keys.epoch(slot))
	}
	_, _ = pipe.Exec(ctx)
	var calls []redisutil.ScriptCall
	var slots []int
	for slot, m := range marks {
		v, err := m.Result()
		if (err == nil && v != l.Epoch) || errors.Is(err, redis.Nil) {
			calls = append(calls, redisutil.ScriptCall{Keys: []string{t.keys.epoch(slot)}, Args: []any{l.Epoch}})
			slots = append(slots, slot)
		}
	}
	if len(calls) == 0 {
		return 0
	}
	cmds, _ := redisutil.RunAll(ctx, t.rdb, markScript, calls)
	gone := 0
	for i, c := range cmds {
		if wrote, err := c.Int(); err == nil && wrote == 1 && slots[i] < known {
			gone++
		}
	}
	return gone
}

// newEpoch draws the epoch a new layout is written with.
func newEpoch() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail (Go 1.24)
	return hex.EncodeToString(b[:])
}
