package parents

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/idhash"
)

// Parent links (docs/concepts.md): a device's gateway or cell, learned from its signals. They live apart from
// the slots, so a device without a parent pays nothing on the signal path and the links need no move
// when the slots double:
//
//   - <prefix>:parents:{<bucket>}: HASH child → parent, the child's bucket = crc32(child) mod
//     parentBuckets, so no one key holds a whole fleet's links on Redis Cluster;
//   - <prefix>:children:{<parent>}: SET of the devices whose link names the parent. A device belongs to
//     one parent at a time: the link is swapped in one script (linkScript) that returns the parent it
//     replaced, and the child then leaves that parent's set (unlink); a deleted device leaves its
//     parent's set too. A set whose last child left is gone (Redis drops an empty set);
//   - <prefix>:parents:any: exists once any link was written, so a fleet without parents never reads them;
//   - the named-parents sets and the verdicts counter: named.go. A parent is named while its
//     children set is not empty: unlink drops the entry of a parent whose last child left or that was
//     deleted without children.
//
// The children set is written before the link and the named parent after it, in one pipeline: whoever
// replaces the link later takes the child out of a set it is already in, and a parent whose last child
// leaves while another joins keeps its entry (unlink looks again after dropping one). Two replicas
// writing one device's link to two parents at the same instant on Redis Cluster, where a pipeline's
// commands to different nodes run side by side, may still leave the child in the set of the parent that
// lost; a process that dies between a link's swap and its unlink leaves the same.

// linkCacheSize bounds the links a Links remembers having written (two generations of half as many):
// a signal repeating a remembered link writes nothing more than a device without one. An entry is two
// hashes and a time, ≈ 40 B with the map's overhead, so a replica remembering 2M links holds ≈ 80 MB.
const linkCacheSize = 1 << 21

// linkRefresh is how long a remembered link goes unwritten: a link Redis lost without the store
// noticing (internal/deadline, datalost.go) is written again by the device's next signal after it.
const linkRefresh = 10 * time.Minute

// linkCache remembers child → parent links written, by hashes of the ids, in two generations: when the
// newer fills up, the older is dropped, so memory stays bounded and links in use survive. A 64-bit hash
// collision would only skip one link write until linkRefresh.
type linkCache struct {
	mu       sync.Mutex
	cur, old map[uint64]linkEntry
}

type linkEntry struct {
	parent uint64
	until  int64 // unix seconds after which the link is written again
}

func (c *linkCache) has(child, parent string, now time.Time) bool {
	k, p, t := idhash.Of(child), idhash.Of(parent), now.Unix()
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.cur[k]; ok {
		return e.parent == p && t < e.until
	}
	if e, ok := c.old[k]; ok && e.parent == p && t < e.until {
		c.putLocked(k, e)
		return true
	}
	return false
}

func (c *linkCache) put(child, parent string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(idhash.Of(child), linkEntry{parent: idhash.Of(parent), until: now.Add(linkRefresh).Unix()})
}

func (c *linkCache) putLocked(k uint64, e linkEntry) {
	if c.cur == nil || len(c.cur) >= linkCacheSize/2 {
		c.old, c.cur = c.cur, make(map[uint64]linkEntry)
	}
	c.cur[k] = e
}

func (c *linkCache) forget(child string) {
	k := idhash.Of(child)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.cur, k)
	delete(c.old, k)
}

// forgetAll forgets every link, so each is written again (Redis lost them).
func (c *linkCache) forgetAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur, c.old = nil, nil
}

// Links is a deadline store's parent links on one Redis (standalone or Cluster): the links it wrote, and
// whether the fleet has any.
type Links struct {
	rdb  redis.UniversalClient
	keys keyspace
	now  func() time.Time // the store's clock (Options.Now), the one the times stored in Redis are on

	written linkCache
	// inUse caches whether <prefix>:parents:any exists, checked at most every inUseTTL.
	inUse   atomic.Bool
	checked atomic.Int64 // unix ms of the last check
	// named caches whether every parent is in the named-parents sets (allNamed), as of namedChecked.
	named        atomic.Bool
	namedChecked atomic.Int64
	// unnamed: Redis lost data, so the named-parents sets may miss parents whose children are silent
	// (their links are written again only by their next signal); allNamed says so in Redis.
	unnamed atomic.Bool
	owed    unlinkOwed // unlinks Redis failed, to do again
}

// New returns the links on rdb under prefix (config redis.key_prefix; "" = its default), timed by now.
func New(rdb redis.UniversalClient, prefix string, now func() time.Time) *Links {
	return &Links{rdb: rdb, keys: newKeyspace(prefix), now: now}
}

// ForgetAll forgets the links written and whether the fleet has any: Redis lost them.
func (l *Links) ForgetAll() {
	l.written.forgetAll()
	l.inUse.Store(false)
	l.checked.Store(0)
	l.namedChecked.Store(0)
	l.unnamed.Store(true)
}

// Forget forgets having written child's link, so its next signal naming a parent writes it.
func (l *Links) Forget(child string) { l.written.forget(child) }

// MarkUsed tells the links that the fleet has parents, once a pipeline that wrote one (QueueInUse) ran.
func (l *Links) MarkUsed() { l.inUse.Store(true) }

// linkScript swaps child's link in its bucket's hash: it sets the parent (ARGV[2]; "" deletes the link)
// and returns the parent it replaced ("" for none), so the caller takes the child out of that parent's
// children set (unlink). One key: it runs on Redis Cluster too, and two writers of one child's link each
// learn exactly the parent they replaced.
//
// KEYS[1] the child's parents hash  ARGV[1] child  ARGV[2] parent, "" to delete the link
var linkScript = redis.NewScript(`
local old = redis.call('HGET', KEYS[1], ARGV[1])
if ARGV[2] == '' then
  if old then redis.call('HDEL', KEYS[1], ARGV[1]) end
elseif old ~= ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return old or ''`)

// Write is one link queued in a pipeline: the child, its parent ("" deletes the link) and the swap's
// reply, the parent it replaced.
type Write struct {
	child, parent string
	replaced      *redis.Cmd
}

// displaced returns the links the writes replaced, (child, former parent), once their pipeline ran: the
// children to take out of their former parents' sets.
func displaced(writes []Write) [][2]string {
	var out [][2]string
	for _, w := range writes {
		if old, err := w.replaced.Text(); err == nil && old != "" && old != w.parent {
			out = append(out, [2]string{w.child, old})
		}
	}
	return out
}

// QueueSignals queues the links signals name, (device, parent) in the batch's order, that are not
// remembered as written, one per device: a device naming several parents in one batch gets the last
// one, as before its links were swapped. It returns the links queued, to remember (Remember) and settle
// (Settle) once the pipeline succeeded. A batch whose links are all remembered allocates nothing.
func (l *Links) QueueSignals(ctx context.Context, pipe redis.Pipeliner, signals iter.Seq2[string, string]) []Write {
	var queued []Write
	var at map[string]int // device → its link in queued, once the batch queued one
	now := time.Now()     // the cache's own clock: how long ago this process wrote a link
	for device, parent := range signals {
		if parent == "" {
			continue
		}
		if i, ok := at[device]; ok {
			queued[i].parent = parent
			continue
		}
		if l.written.has(device, parent, now) {
			continue
		}
		if at == nil {
			at = map[string]int{}
		}
		at[device] = len(queued)
		queued = append(queued, Write{child: device, parent: parent})
	}
	for i := range queued {
		queued[i] = l.QueueLink(ctx, pipe, queued[i].child, queued[i].parent)
	}
	if len(queued) > 0 {
		l.QueueInUse(ctx, pipe)
	}
	return queued
}

// QueueLink queues the link child → parent ("" deletes the child's link): its member in the parent's
// children set, the swap of its field in the child's parents hash (linkScript, whose reply the Write
// holds) and the parent's entry in the named parents, in that order (see the top of this file). The
// caller also marks the fleet as having parents once per pipeline that writes a link (QueueInUse), and
// settles the writes once the pipeline ran (Unlink).
func (l *Links) QueueLink(ctx context.Context, pipe redis.Pipeliner, child, parent string) Write {
	if parent != "" {
		pipe.SAdd(ctx, l.keys.children(parent), child)
	}
	// Eval, not EvalSha: a pipeline that also carries other scripts could not tell whose NOSCRIPT it got.
	swap := linkScript.Eval(ctx, pipe, []string{l.keys.parents(child)}, child, parent)
	if parent != "" {
		pipe.SAdd(ctx, l.keys.namedParents(parent), parent)
	}
	return Write{child: child, parent: parent, replaced: swap}
}

// Remember records links written, after their pipeline succeeded.
func (l *Links) Remember(links []Write) {
	if len(links) == 0 {
		return
	}
	now := time.Now()
	for _, w := range links {
		l.written.put(w.child, w.parent, now)
	}
	l.inUse.Store(true)
}

// Settle takes the children of the links a refresh wrote out of the sets of the parents they left. It
// costs nothing unless a link changed. A failure is owed (Unlink) and not the batch's: its deadlines and
// links are stored.
func (l *Links) Settle(ctx context.Context, links []Write) {
	if len(links) == 0 && !l.owing() {
		return
	}
	_ = l.unlink(ctx, displaced(links), nil)
}

// SetParent records device's parent directly ("" removes the link), outside signals and registrations,
// taking the device out of its former parent's children. The keys are in different hash slots, so it is
// a plain pipeline, not a transaction.
func (l *Links) SetParent(ctx context.Context, device, parent string) error {
	pipe := l.rdb.Pipeline()
	w := []Write{l.QueueLink(ctx, pipe, device, parent)}
	if parent != "" {
		l.QueueInUse(ctx, pipe)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("parents: set parent of %q: %w", device, err)
	}
	l.written.forget(device)
	if err := l.unlink(ctx, displaced(w), nil); err != nil {
		return fmt.Errorf("parents: set parent of %q: %w", device, err)
	}
	return nil
}
