package deadline

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/idhash"
	"github.com/heartbeatd/heartbeatd/internal/redisutil"
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
//   - the named-parents sets and the verdicts counter: parentview.go. A parent is named while its
//     children set is not empty: unlink drops the entry of a parent whose last child left or that was
//     deleted without children.
//
// The children set is written before the link and the named parent after it, in one pipeline: whoever
// replaces the link later takes the child out of a set it is already in, and a parent whose last child
// leaves while another joins keeps its entry (unlink looks again after dropping one). Two replicas
// writing one device's link to two parents at the same instant on Redis Cluster, where a pipeline's
// commands to different nodes run side by side, may still leave the child in the set of the parent that
// lost; a process that dies between a link's swap and its unlink leaves the same.

// parentBuckets is how many hashes the child → parent links are spread over.
const parentBuckets = 64

func (k Keyspace) parents(child string) string { return k.prefix + ":parents:" + bucket(child) }

// parentsBucket is the links hash of bucket b (parents(child) is one of them).
func (k Keyspace) parentsBucket(b int) string { return k.prefix + ":parents:" + bucketTag(b) }

// bucket is the hash tag "{crc32(device) mod parentBuckets}" of the per-device hashes kept apart from
// the slots (parent links).
func bucket(device string) string {
	return bucketTag(int(crc32.ChecksumIEEE([]byte(device)) % parentBuckets))
}

func bucketTag(b int) string { return "{" + strconv.Itoa(b) + "}" }

// children is the set of the devices that named parent as theirs.
func (k Keyspace) children(parent string) string { return k.prefix + ":children:{" + parent + "}" }

func (k Keyspace) parentsInUse() string { return k.prefix + ":parents:any" }

// linkCacheSize bounds the links a Store remembers having written (two generations of half as many):
// a signal repeating a remembered link writes nothing more than a device without one. An entry is two
// hashes and a time, ≈ 40 B with the map's overhead, so a replica remembering 2M links holds ≈ 80 MB.
const linkCacheSize = 1 << 21

// linkRefresh is how long a remembered link goes unwritten: a link Redis lost without the store
// noticing (datalost.go) is written again by the device's next signal after it.
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

// parentLinks is a Store's view of the links: what it wrote, and whether the fleet has any.
type parentLinks struct {
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
	views   parentViews
	owed    unlinkOwed // unlinks Redis failed, to do again
}

// forgetAll forgets the links written and whether the fleet has any: Redis lost them.
func (l *parentLinks) forgetAll() {
	l.written.forgetAll()
	l.inUse.Store(false)
	l.checked.Store(0)
	l.namedChecked.Store(0)
	l.unnamed.Store(true)
	l.views.forgetAll()
}

// inUseTTL is how long a replica trusts its answer to "does the fleet have parents?". A replica that
// writes a link knows at once; the others learn within this long.
const inUseTTL = 2 * time.Second

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

// linkWrite is one link queued in a pipeline: the child, its parent ("" deletes the link) and the
// swap's reply, the parent it replaced.
type linkWrite struct {
	child, parent string
	replaced      *redis.Cmd
}

// displaced returns the links the writes replaced, (child, former parent), once their pipeline ran: the
// children to take out of their former parents' sets.
func displaced(writes []linkWrite) [][2]string {
	var out [][2]string
	for _, w := range writes {
		if old, err := w.replaced.Text(); err == nil && old != "" && old != w.parent {
			out = append(out, [2]string{w.child, old})
		}
	}
	return out
}

// writeLinks queues the links of signals that name a parent not remembered as written, one per device:
// a device naming several parents in one batch gets the last one, as before its links were swapped. It
// returns the links queued, to remember and settle (settleLinks) once the pipeline succeeded. A batch
// whose links are all remembered allocates nothing.
func (s *Store) writeLinks(ctx context.Context, pipe redis.Pipeliner, signals []Signal) []linkWrite {
	var queued []linkWrite
	var at map[string]int // device → its link in queued, once the batch queued one
	now := time.Now()     // the cache's own clock: how long ago this process wrote a link
	for _, sig := range signals {
		if sig.Parent == "" {
			continue
		}
		if i, ok := at[sig.Device]; ok {
			queued[i].parent = sig.Parent
			continue
		}
		if s.links.written.has(sig.Device, sig.Parent, now) {
			continue
		}
		if at == nil {
			at = map[string]int{}
		}
		at[sig.Device] = len(queued)
		queued = append(queued, linkWrite{child: sig.Device, parent: sig.Parent})
	}
	for i := range queued {
		queued[i].replaced = s.queueLink(ctx, pipe, queued[i].child, queued[i].parent)
	}
	if len(queued) > 0 {
		s.queueInUse(ctx, pipe)
	}
	return queued
}

// queueLink queues the link child → parent ("" deletes the child's link): its member in the parent's
// children set, the swap of its field in the child's parents hash (linkScript, whose reply it returns)
// and the parent's entry in the named parents, in that order (see the top of this file). The caller also
// marks the fleet as having parents once per pipeline that writes a link (queueInUse), and settles the
// writes once the pipeline ran (unlink of displaced).
func (s *Store) queueLink(ctx context.Context, pipe redis.Pipeliner, child, parent string) *redis.Cmd {
	if parent != "" {
		pipe.SAdd(ctx, s.keys.children(parent), child)
	}
	// Eval, not EvalSha: a pipeline that also carries other scripts could not tell whose NOSCRIPT it got.
	swap := linkScript.Eval(ctx, pipe, []string{s.keys.parents(child)}, child, parent)
	if parent != "" {
		pipe.SAdd(ctx, s.keys.namedParents(parent), parent)
	}
	return swap
}

// remember records links written, after their pipeline succeeded.
func (s *Store) remember(links []linkWrite) {
	if len(links) == 0 {
		return
	}
	now := time.Now()
	for _, l := range links {
		s.links.written.put(l.child, l.parent, now)
	}
	s.links.inUse.Store(true)
}

// settleLinks takes the children of the links a refresh wrote out of the sets of the parents they left.
// It costs nothing unless a link changed. A failure is owed (unlink) and not the batch's: its deadlines
// and links are stored.
func (s *Store) settleLinks(ctx context.Context, links []linkWrite) {
	if len(links) == 0 && !s.links.owing() {
		return
	}
	_ = s.unlink(ctx, displaced(links), nil)
}

// SetParent records device's parent directly ("" removes the link), outside signals and registrations,
// taking the device out of its former parent's children. The keys are in different hash slots, so it is
// a plain pipeline, not a transaction.
func (s *Store) SetParent(ctx context.Context, device, parent string) error {
	pipe := s.rdb.Pipeline()
	w := []linkWrite{{child: device, parent: parent, replaced: s.queueLink(ctx, pipe, device, parent)}}
	if parent != "" {
		s.queueInUse(ctx, pipe)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("deadline: set parent of %q: %w", device, err)
	}
	s.links.written.forget(device)
	if err := s.unlink(ctx, displaced(w), nil); err != nil {
		return fmt.Errorf("deadline: set parent of %q: %w", device, err)
	}
	return nil
}

// unlinkOwedMax bounds the unlinks a Store keeps owing after Redis failed them; past it the newest are
// dropped (each would leave one child in a former parent's set).
const unlinkOwedMax = 1 << 16

// unlinkOwed is what unlink could not do yet: children to take out of former parents' sets, and parents
// to drop from the named parents when their set is empty.
type unlinkOwed struct {
	mu      sync.Mutex
	links   [][2]string
	parents []string
	any     atomic.Bool
}

// owing reports whether unlinks are owed.
func (l *parentLinks) owing() bool { return l.owed.any.Load() }

// takeOwed returns links and parents with the owed ones added, and owes nothing more.
func (l *parentLinks) takeOwed(links [][2]string, parents []string) ([][2]string, []string) {
	if !l.owing() {
		return links, parents
	}
	o := &l.owed
	o.mu.Lock()
	defer o.mu.Unlock()
	links, parents = append(o.links, links...), append(o.parents, parents...)
	o.links, o.parents = nil, nil
	o.any.Store(false)
	return links, parents
}

// owe keeps links and parents for the next unlink.
func (l *parentLinks) owe(links [][2]string, parents []string) {
	o := &l.owed
	o.mu.Lock()
	defer o.mu.Unlock()
	o.links = append(o.links, links[:min(len(links), max(unlinkOwedMax-len(o.links), 0))]...)
	o.parents = append(o.parents, parents[:min(len(parents), max(unlinkOwedMax-len(o.parents), 0))]...)
	o.any.Store(len(o.links)+len(o.parents) > 0)
}

// unlink takes each child of links (child, former parent) out of its former parent's children set, then
// drops from the named parents each of those parents, and of parents, whose children set is empty: a
// device named as a parent stays named only while some device's link names it. One round trip, one
// more for the parents whose entry goes, and one to look at those again: a child that named one of them
// meanwhile wrote its children set before its named entry, so an entry dropped under it is put back.
// What fails is owed and tried again by the next call (a link change, a delete, a sweep pass).
func (s *Store) unlink(ctx context.Context, links [][2]string, parents []string) error {
	links, parents = s.links.takeOwed(links, parents)
	if len(links) == 0 && len(parents) == 0 {
		return nil
	}
	if err := s.unlinkNow(ctx, links, parents); err != nil {
		s.links.owe(links, parents)
		return fmt.Errorf("deadline: unlink %d children: %w", len(links), err)
	}
	return nil
}

func (s *Store) unlinkNow(ctx context.Context, links [][2]string, parents []string) error {
	pipe := s.rdb.Pipeline()
	seen := make(map[string]bool, len(links)+len(parents))
	var candidates []string
	for _, l := range links {
		pipe.SRem(ctx, s.keys.children(l[1]), l[0])
		if !seen[l[1]] {
			seen[l[1]] = true
			candidates = append(candidates, l[1])
		}
	}
	for _, p := range parents {
		if !seen[p] {
			seen[p] = true
			candidates = append(candidates, p)
		}
	}
	// After the SREMs: each SCARD goes to the node of its set's SREMs, in order.
	cards := make([]*redis.IntCmd, len(candidates))
	named := make([]*redis.BoolCmd, len(candidates))
	for i, p := range candidates {
		cards[i] = pipe.SCard(ctx, s.keys.children(p))
		named[i] = pipe.SIsMember(ctx, s.keys.namedParents(p), p)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	var empty []string
	for i, p := range candidates {
		if cards[i].Val() == 0 && named[i].Val() {
			empty = append(empty, p)
		}
	}
	if len(empty) == 0 {
		return nil
	}
	pipe = s.rdb.Pipeline()
	for _, p := range empty {
		pipe.SRem(ctx, s.keys.namedParents(p), p)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	pipe = s.rdb.Pipeline()
	again := make([]*redis.IntCmd, len(empty))
	for i, p := range empty {
		again[i] = pipe.SCard(ctx, s.keys.children(p))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	pipe = s.rdb.Pipeline()
	for i, p := range empty {
		if again[i].Val() > 0 { // a child named it meanwhile
			pipe.SAdd(ctx, s.keys.namedParents(p), p)
		}
	}
	if pipe.Len() == 0 {
		return nil
	}
	_, err := pipe.Exec(ctx)
	return err
}

// PayUnlinks does the unlinks owed since Redis failed them (unlink); the sweep calls it every pass.
func (s *Store) PayUnlinks(ctx context.Context) error {
	if !s.links.owing() {
		return nil
	}
	return s.unlink(ctx, nil, nil)
}

// parentsUsed reports whether any device of the fleet has a parent.
func (s *Store) parentsUsed(ctx context.Context) (bool, error) {
	if s.links.inUse.Load() {
		return true, nil
	}
	now := time.Now().UnixMilli()
	if last := s.links.checked.Load(); now-last < inUseTTL.Milliseconds() {
		return false, nil
	}
	n, err := s.rdb.Exists(ctx, s.keys.parentsInUse()).Result()
	if err != nil {
		return false, fmt.Errorf("deadline: parents in use: %w", err)
	}
	s.links.checked.Store(now)
	if n > 0 {
		s.links.inUse.Store(true)
	}
	return n > 0, nil
}

// ParentsOf returns each device's parent ("" for none), in one round trip; nothing at all while no
// device of the fleet has a parent.
func (s *Store) ParentsOf(ctx context.Context, devices []string) ([]string, error) {
	out := make([]string, len(devices))
	if len(devices) == 0 {
		return out, nil
	}
	if used, err := s.parentsUsed(ctx); err != nil || !used {
		return out, err
	}
	keyOf := func(i int) string { return s.keys.parents(devices[i]) }
	err := redisutil.FieldsByKey(ctx, s.rdb, keyOf, devices, func(i int, v string) { out[i] = v })
	if err != nil {
		return nil, fmt.Errorf("deadline: parents: %w", err)
	}
	return out, nil
}

// Parent is what the alarm loop needs to know of a device's parent to judge the device's silence.
type Parent struct {
	ID string
	// Known: Redis knows the parent (it signalled once, or is registered). An unknown parent is no
	// excuse: the child alarms on its own.
	Known bool
	// Down: the parent's own interruption (or suppression) was reported and it has not signalled since.
	Down bool
	// LastSignal is the parent's last signal; Deadline its current deadline (the open incident's while
	// it is down).
	LastSignal, Deadline time.Time
}

// readParents reads what the alarm loop needs of each parent from Redis, one round trip for all.
func (s *Store) readParents(ctx context.Context, ids []string) (map[string]Parent, error) {
	out := make(map[string]Parent, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	l := s.layout.Load()
	if l.Moving() { // rare: an incident may still live in the old slot; Device looks in both
		for _, id := range ids {
			d, found, err := s.Device(ctx, id)
			if err != nil {
				return nil, err
			}
			out[id] = s.parentOf(d, found)
		}
		return out, nil
	}
	type reads struct {
		score *redis.FloatCmd
		state *redis.StringCmd
		seen  *redis.FloatCmd // a scheduled parent's recorded last signal (nil: no type has a schedule)
	}
	scheduled := s.typeExpected != nil
	pipe := s.rdb.Pipeline()
	rs := make([]reads, len(ids))
	for i, id := range ids {
		slot := Slot(id, l.Slots)
		rs[i] = reads{score: pipe.ZScore(ctx, s.keys.Deadlines(slot), id), state: pipe.HGet(ctx, s.keys.state(slot), id)}
		if scheduled {
			rs[i].seen = pipe.ZScore(ctx, s.keys.seen(slot), id)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("deadline: parents: %w", err)
	}
	now := s.now()
	for i, id := range ids {
		d, found, err := s.deviceFrom(ctx, id, rs[i].score, rs[i].state)
		if err != nil {
			return nil, err
		}
		if v := rs[i].seen; v != nil && found {
			if _, ok := s.expected(d.recordedType(), now); ok {
				d.LastSignal = msTime(v.Val())
			}
		}
		out[id] = s.parentOf(d, found)
	}
	return out, nil
}

// parentOf judges one parent from what Redis holds of it.
func (s *Store) parentOf(d Device, found bool) Parent {
	p := Parent{ID: d.ID, Known: found}
	if !found {
		return p
	}
	p.Deadline = d.Deadline
	if inc := d.Incident; inc != nil {
		incDeadline := inc.DeadlineTime()
		if !d.Deadline.After(incDeadline) { // no signal since the incident began
			p.Deadline = incDeadline
			p.Down = inc.Next > 0
		}
	}
	if !d.LastSignal.IsZero() {
		// A scheduled type's deadline is its next expected time, not its last signal + a timeout: its
		// last signal is recorded.
		p.LastSignal = d.LastSignal
		return p
	}
	// A warned type's score is its warning (warn.go); the parent is judged by its own deadline.
	p.LastSignal = p.Deadline.Add(-s.lead(d.recordedType()))
	p.Deadline = p.LastSignal.Add(s.timeout(d.recordedType()))
	return p
}
