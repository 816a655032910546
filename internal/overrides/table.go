package overrides

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/redisutil"
)

// Table is the per-device timeouts on one Redis (standalone or Cluster), and this replica's copy of them.
type Table struct {
	rdb  redis.UniversalClient
	keys keyspace
	cur  atomic.Pointer[snapshot]
	// owed is set while the table has not been written back since the last data loss (MarkLost).
	owed atomic.Bool
}

// snapshot is the per-device timeout names this replica applies to signals, and the version of the
// table in Redis it was read at.
type snapshot struct {
	version int64
	byDev   map[string]string
}

// New returns the table on rdb under prefix (config redis.key_prefix; "" = its default).
func New(rdb redis.UniversalClient, prefix string) *Table {
	return &Table{rdb: rdb, keys: newKeyspace(prefix)}
}

// Current is the table as last read, device → its own timeout's type name (nil before the first read);
// the caller reads it only. A fleet without per-device timeouts pays one atomic load.
func (t *Table) Current() map[string]string {
	if c := t.cur.Load(); c != nil {
		return c.byDev
	}
	return nil
}

// QueueSet queues device's own timeout type name in pipe; QueueChanged tells the replicas.
func (t *Table) QueueSet(ctx context.Context, pipe redis.Pipeliner, device, name string) {
	pipe.HSet(ctx, t.keys.overrides(), device, name)
}

// QueueRemove queues the removal of device's own timeout in pipe; the reply counts 1 when it had one.
func (t *Table) QueueRemove(ctx context.Context, pipe redis.Pipeliner, device string) *redis.IntCmd {
	return pipe.HDel(ctx, t.keys.overrides(), device)
}

// QueueChanged moves the version in pipe, so every replica reads the table again.
func (t *Table) QueueChanged(ctx context.Context, pipe redis.Pipeliner) {
	pipe.Incr(ctx, t.keys.version())
}

// Changed moves the version, so every replica reads the table again.
func (t *Table) Changed(ctx context.Context) error {
	return t.rdb.Incr(ctx, t.keys.version()).Err()
}

// MarkLost owes Redis the table this replica holds: Redis lost data, and the next Sync writes it back.
func (t *Table) MarkLost() { t.owed.Store(true) }

// Hooks is what Sync asks of the store that holds the table.
type Hooks struct {
	// CheckLost looks for a data loss, when the version went back while nothing is owed (the version
	// only grows), and calls MarkLost when it finds one.
	CheckLost func(ctx context.Context) error
	// BeforeRestore runs before a lost table is written back: the type registry first, or a name
	// registered before it would get another index.
	BeforeRestore func(ctx context.Context) error
	// Allow registers a name the table holds, before the table is applied.
	Allow func(ctx context.Context, name string) error
}

// Sync reads the table when its version in Redis moved since the last read. After a data loss it first
// writes back the table it holds: the version only grows, so one that went back is a loss even before
// the store's layout read has noticed it.
func (t *Table) Sync(ctx context.Context, h Hooks) error {
	v, err := t.version(ctx)
	if err != nil {
		return err
	}
	cur := t.cur.Load()
	if cur != nil && v < cur.version && !t.owed.Load() {
		if err := h.CheckLost(ctx); err != nil {
			return err
		}
	}
	if t.owed.Load() {
		if v, err = t.restore(ctx, cur, v, h); err != nil {
			return err
		}
	}
	if cur != nil && cur.version == v {
		return nil
	}
	all, err := t.rdb.HGetAll(ctx, t.keys.overrides()).Result()
	if err != nil {
		return fmt.Errorf("overrides: %w", err)
	}
	seen := map[string]bool{}
	for _, name := range all {
		if !seen[name] {
			seen[name] = true
			if err := h.Allow(ctx, name); err != nil {
				return err
			}
		}
	}
	t.cur.Store(&snapshot{version: v, byDev: all})
	return nil
}

func (t *Table) version(ctx context.Context) (int64, error) {
	v, err := t.rdb.Get(ctx, t.keys.version()).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("overrides: version: %w", err)
	}
	return v, nil
}

// restore writes back the per-device timeouts of table that Redis no longer holds, leaving any device
// written since as it is, and moves the version past both the table's and Redis's (v) so every replica
// reads the table again. It returns the version after it.
func (t *Table) restore(ctx context.Context, table *snapshot, v int64, h Hooks) (int64, error) {
	if table == nil || len(table.byDev) == 0 {
		t.owed.Store(false)
		return v, nil
	}
	if err := h.BeforeRestore(ctx); err != nil {
		return 0, err
	}
	pairs := make([]any, 0, 2*len(table.byDev))
	for dev, name := range table.byDev {
		pairs = append(pairs, dev, name)
	}
	if _, err := redisutil.SetMissing(ctx, t.rdb, t.keys.overrides(), pairs); err != nil {
		return 0, fmt.Errorf("overrides: restore: %w", err)
	}
	next, err := t.rdb.IncrBy(ctx, t.keys.version(), table.version+1).Result()
	if err != nil {
		return 0, fmt.Errorf("overrides: restore: %w", err)
	}
	t.owed.Store(false)
	return next, nil
}
