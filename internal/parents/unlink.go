package parents

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// unlinkOwedMax bounds the unlinks a Links keeps owing after Redis failed them; past it the newest are
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
func (l *Links) owing() bool { return l.owed.any.Load() }

// takeOwed returns links and parents with the owed ones added, and owes nothing more.
func (l *Links) takeOwed(links [][2]string, parents []string) ([][2]string, []string) {
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
func (l *Links) owe(links [][2]string, parents []string) {
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
func (l *Links) unlink(ctx context.Context, links [][2]string, parents []string) error {
	links, parents = l.takeOwed(links, parents)
	if len(links) == 0 && len(parents) == 0 {
		return nil
	}
	if err := l.unlinkNow(ctx, links, parents); err != nil {
		l.owe(links, parents)
		return fmt.Errorf("parents: unlink %d children: %w", len(links), err)
	}
	return nil
}

// Unlink settles writes once their pipeline ran: each child whose link was replaced leaves its former
// parent's children set, and parents (devices deleted) are dropped from the named parents when no
// child names them (unlink).
func (l *Links) Unlink(ctx context.Context, writes []Write, parents []string) error {
	return l.unlink(ctx, displaced(writes), parents)
}

func (l *Links) unlinkNow(ctx context.Context, links [][2]string, parents []string) error {
	pipe := l.rdb.Pipeline()
	seen := make(map[string]bool, len(links)+len(parents))
	var candidates []string
	for _, link := range links {
		pipe.SRem(ctx, l.keys.children(link[1]), link[0])
		if !seen[link[1]] {
			seen[link[1]] = true
			candidates = append(candidates, link[1])
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
		cards[i] = pipe.SCard(ctx, l.keys.children(p))
		named[i] = pipe.SIsMember(ctx, l.keys.namedParents(p), p)
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
	pipe = l.rdb.Pipeline()
	for _, p := range empty {
		pipe.SRem(ctx, l.keys.namedParents(p), p)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	pipe = l.rdb.Pipeline()
	again := make([]*redis.IntCmd, len(empty))
	for i, p := range empty {
		again[i] = pipe.SCard(ctx, l.keys.children(p))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	pipe = l.rdb.Pipeline()
	for i, p := range empty {
		if again[i].Val() > 0 { // a child named it meanwhile
			pipe.SAdd(ctx, l.keys.namedParents(p), p)
		}
	}
	if pipe.Len() == 0 {
		return nil
	}
	_, err := pipe.Exec(ctx)
	return err
}

// PayUnlinks does the unlinks owed since Redis failed them (unlink); the sweep calls it every pass.
func (l *Links) PayUnlinks(ctx context.Context) error {
	if !l.owing() {
		return nil
	}
	return l.unlink(ctx, nil, nil)
}
