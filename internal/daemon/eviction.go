package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/loop"
)

// evictionCheckEvery is how often Redis's maxmemory-policy is read again: an operator may change it at
// run time (CONFIG SET), and reading it costs one command per master.
const evictionCheckEvery = 10 * time.Minute

// evictionGuard warns, in the log and as a /readyz note, while a Redis master runs a maxmemory-policy
// that may evict heartbeatd's keys. Deadlines carry no TTL, so noeviction and the volatile-* policies
// never evict them; allkeys-* would drop deadlines under memory pressure, and an evicted device never
// alarms.
type evictionGuard struct {
	rdb redis.UniversalClient
	log *zap.Logger

	mu           sync.Mutex
	note         string // "" while every master is safe
	unreadLogged bool   // the "cannot read" line was logged
}

func newEvictionGuard(rdb redis.UniversalClient, log *zap.Logger) *evictionGuard {
	return &evictionGuard{rdb: rdb, log: log.With(zap.String("component", "redis-policy"))}
}

// evicts reports whether policy may evict keys without a TTL.
func evicts(policy string) bool {
	return policy != "noeviction" && !strings.HasPrefix(policy, "volatile-")
}

// check reads every master's policy and updates the note; a change is logged. A Redis that refuses
// CONFIG (managed services, ACLs, a renamed command) is logged once and leaves no note: heartbeatd cannot
// tell, and it is not an error to run there. A Redis that does not answer is an error (tried again).
func (g *evictionGuard) check(ctx context.Context) error {
	var mu sync.Mutex
	var unsafe []string
	read := func(ctx context.Context, c redis.UniversalClient, node string) error {
		got, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			return err
		}
		if p := got["maxmemory-policy"]; p != "" && evicts(p) {
			mu.Lock()
			unsafe = append(unsafe, fmt.Sprintf("%s on %s", p, node))
			mu.Unlock()
		}
		return nil
	}
	var err error
	if cc, ok := g.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return read(ctx, c, c.Options().Addr) })
	} else {
		err = read(ctx, g.rdb, "redis")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var refused redis.Error
	if err != nil && !errors.As(err, &refused) {
		return fmt.Errorf("daemon: read Redis maxmemory-policy: %w", err)
	}
	if err != nil {
		if !g.unreadLogged {
			g.unreadLogged = true
			g.log.Info("cannot read Redis maxmemory-policy; make sure it is noeviction (or volatile-*), or deadlines may be evicted",
				zap.Error(err))
		}
		return nil
	}
	note := ""
	if len(unsafe) > 0 {
		note = fmt.Sprintf("maxmemory-policy %s may evict deadlines under memory pressure (an evicted device never alarms): "+
			"set noeviction, or a volatile-* policy", strings.Join(unsafe, ", "))
	}
	switch {
	case note != "" && note != g.note:
		g.log.Warn("Redis may evict deadlines", zap.String("why", note))
	case note == "" && g.note != "":
		g.log.Info("Redis maxmemory-policy no longer evicts deadlines")
	}
	g.note = note
	return nil
}

// run checks at start and every evictionCheckEvery until ctx is done.
func (g *evictionGuard) run(ctx context.Context) error {
	loop.Every(ctx, loop.Options{Interval: evictionCheckEvery, Immediate: true}, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return g.check(cctx)
	})
	return nil
}

// notes is the eviction guard's part of the /readyz notes (daemon.notes).
func (g *evictionGuard) notes() map[string]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.note == "" {
		return nil
	}
	return map[string]string{"redis": g.note}
}
