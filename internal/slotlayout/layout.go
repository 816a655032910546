// Package slotlayout keeps the fleet's slot layout in Redis: how many slots the fleet uses, the count
// before a doubling while it settles, and the epoch that tells a Redis that lost heartbeatd's data.
// internal/deadline stores each slot's data; this package only says which slots there are.
package slotlayout

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/redisutil"
)

// Layout is the slot count in force and, while a doubling settles, the count before it.
//
// Doubling from N to 2N needs no data migration: writers use 2N at once, so a device whose new slot is
// s+N writes there and drops its old entry in slot s (reading it first, so a deadline never moves back and
// an untyped signal keeps its type). A device that stays silent is claimed from its old slot. Claims of a
// moved device check the other slot and are undone when it holds a newer deadline (a replica that had not
// seen the new layout yet); the recovery re-check and the recovery probe look at both slots. Once the
// longest timeout plus one repeat cycle has passed, every old entry has come due: the few open incidents
// left in old slots are moved to their new slot and the old layout is retired (internal/deadline,
// Store.RetireLayout).
type Layout struct {
	Slots     int
	Previous  int       // the count before the last doubling while it settles; 0 = settled
	ChangedAt time.Time // when the last doubling began
	// Epoch names the data Redis holds: it is drawn when the layout is first written, so a Redis that
	// lost heartbeatd's data shows a new one (datalost.go). "" until the layout was read.
	Epoch string
	// Losses counts the data losses replicas noticed on Redis masters other than the layout's (a Redis
	// Cluster master restarted empty), so that every replica reacts to each (datalost.go).
	Losses int64
}

// Moving reports whether a doubling is settling.
func (l Layout) Moving() bool { return l.Previous > 0 }

// OldSlot returns the device's slot under the previous count when a doubling is settling and it differs.
func (l Layout) OldSlot(device string) (int, bool) {
	if l.Previous == 0 {
		return 0, false
	}
	o := Slot(device, l.Previous)
	return o, o != Slot(device, l.Slots)
}

// layoutScript reads, initialises or doubles the layout.
//
// KEYS[1] layout hash
// ARGV[1] slots to initialise with  ARGV[2] now (ms)  ARGV[3] "double" to double, "" to read
// ARGV[4] an epoch for a layout that has none yet (a new one, or one an older version wrote)
// Reply: {slots, previous, changed_at ms, epoch, losses}, or an error when a doubling is asked while one
// settles.
var layoutScript = redis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], 'slots'))
if not cur then
  cur = tonumber(ARGV[1])
  redis.call('HSET', KEYS[1], 'slots', cur)
end
redis.call('HSETNX', KEYS[1], 'epoch', ARGV[4])
local epoch = redis.call('HGET', KEYS[1], 'epoch')
local prev = tonumber(redis.call('HGET', KEYS[1], 'previous') or '0')
local changed = tonumber(redis.call('HGET', KEYS[1], 'changed_at') or '0')
local losses = tonumber(redis.call('HGET', KEYS[1], 'losses') or '0')
if ARGV[3] == 'double' then
  if prev > 0 then
    return redis.error_reply('the doubling from ' .. prev .. ' to ' .. cur .. ' slots is still settling')
  end
  if cur * 2 > 16384 then return redis.error_reply('16384 slots is the most') end
  redis.call('HSET', KEYS[1], 'slots', cur * 2, 'previous', cur, 'changed_at', ARGV[2])
  return {cur * 2, cur, tonumber(ARGV[2]), epoch, losses}
end
return {cur, prev, changed, epoch, losses}
`)

// ErrHalving is returned when the configured slot count is below the fleet's: slots can only be doubled.
var ErrHalving = errors.New("slot layout: halving the slot count is not supported")

// ErrStepTooLarge is returned when the configured slot count is more than twice the fleet's: a doubling is
// one step at a time.
var ErrStepTooLarge = errors.New("slot layout: more than one doubling at once")

// Tracker is this process's view of the layout, read again at every ownership heartbeat.
type Tracker struct {
	rdb     redis.UniversalClient
	keys    keyspace
	now     func() time.Time
	current atomic.Pointer[Layout]
	lost    dataLoss
	onLoss  func()
}

// New returns a tracker that assumes slots until its first read. onLoss runs at each data loss it
// notices: the caller forgets what it remembers having written (datalost.go).
func New(rdb redis.UniversalClient, prefix string, slots int, now func() time.Time, onLoss func()) *Tracker {
	t := &Tracker{rdb: rdb, keys: newKeyspace(prefix), now: now, onLoss: onLoss}
	t.current.Store(&Layout{Slots: slots})
	return t
}

// Load returns the layout in force, as last read.
func (t *Tracker) Load() *Layout { return t.current.Load() }

// Sync adopts the fleet's slot layout from Redis, initialising it with configured the first time. A
// configured count twice the fleet's doubles it (the admin path: change redis.slots, restart or reload
// the replicas one by one); a smaller count is refused with ErrHalving; a larger step with ErrStepTooLarge.
func (t *Tracker) Sync(ctx context.Context, configured int) (Layout, error) {
	l, err := t.run(ctx, configured, "")
	if err != nil {
		return l, err
	}
	switch {
	case configured == l.Slots:
	case configured < l.Slots:
		return l, fmt.Errorf("%w: redis.slots is %d but the fleet in Redis uses %d; set redis.slots to %d", ErrHalving, configured, l.Slots, l.Slots)
	case configured == 2*l.Slots:
		return t.run(ctx, configured, "double")
	default:
		return l, fmt.Errorf("%w: redis.slots is %d but the fleet in Redis uses %d; double one step at a time (%d)", ErrStepTooLarge,
			configured, l.Slots, 2*l.Slots)
	}
	return l, nil
}

// Double doubles the fleet's slot count online; every replica adopts it within one ownership heartbeat.
func (t *Tracker) Double(ctx context.Context) (Layout, error) {
	return t.run(ctx, t.Load().Slots, "double")
}

// Refresh reads the layout from Redis again.
func (t *Tracker) Refresh(ctx context.Context) (Layout, error) { return t.run(ctx, t.Load().Slots, "") }

// Retiring takes the lock that keeps retiring a settled doubling to one replica at a time; ok is false
// while another holds it. unlock releases it.
func (t *Tracker) Retiring(ctx context.Context) (unlock func(), ok bool, err error) {
	ok, err = t.rdb.SetNX(ctx, t.keys.retiring(), "1", time.Minute).Result()
	if err != nil || !ok {
		return func() {}, false, err
	}
	return func() { t.rdb.Del(context.WithoutCancel(ctx), t.keys.retiring()) }, true, nil
}

// Retire forgets the previous count once the doubling settled and its data moved, and reads the layout.
func (t *Tracker) Retire(ctx context.Context) (Layout, error) {
	if err := t.rdb.HDel(ctx, t.keys.layout(), "previous", "changed_at").Err(); err != nil {
		return *t.Load(), fmt.Errorf("slot layout: retire: %w", err)
	}
	return t.Refresh(ctx)
}

func (t *Tracker) run(ctx context.Context, slots int, op string) (Layout, error) {
	v, err := layoutScript.Run(ctx, t.rdb, []string{t.keys.layout()}, slots, t.now().UnixMilli(), op, newEpoch()).Result()
	if err != nil {
		return *t.Load(), fmt.Errorf("slot layout: %w", err)
	}
	l, err := parseLayout(v)
	if err != nil {
		return *t.Load(), err
	}
	before := t.current.Swap(&l)
	t.followLosses(ctx, *before, l)
	return l, nil
}

// parseLayout reads layoutScript's reply.
func parseLayout(v any) (Layout, error) {
	r := redisutil.ReplyReader{Script: "slot layout"}
	f := r.Fields(v, 5)
	if r.Err != nil {
		return Layout{}, r.Err
	}
	l := Layout{Slots: int(r.Int(f[0], "slots")), Previous: int(r.Int(f[1], "previous")), Epoch: r.String(f[3], "epoch"),
		Losses: r.Int(f[4], "losses")}
	if changed := r.Int(f[2], "changed_at"); changed > 0 {
		l.ChangedAt = time.UnixMilli(changed)
	}
	switch {
	case r.Err != nil:
		return Layout{}, r.Err
	case l.Slots <= 0 || l.Slots&(l.Slots-1) != 0:
		return Layout{}, fmt.Errorf("slot layout: Redis has %d slots, not a power of two", l.Slots)
	}
	return l, nil
}
