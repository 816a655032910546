package daemon

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heartbeatd/heartbeatd/internal/holdback"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// A Redis whose maxmemory-policy may evict keys without a TTL (allkeys-*) is warned about once per change
// and named in /readyz, which stays 200; noeviction and volatile-* (deadlines have no TTL) are not.
func TestEvictionPolicyNote(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	ctx := context.Background()
	core, logs := observer.New(zap.InfoLevel)
	g := newEvictionGuard(rdb, zap.New(core))
	setPolicy := func(p string) {
		t.Helper()
		require.NoError(t, rdb.ConfigSet(ctx, "maxmemory-policy", p).Err())
		require.NoError(t, g.check(ctx))
	}

	setPolicy("noeviction")
	require.Empty(t, g.notes())
	setPolicy("volatile-lru")
	require.Empty(t, g.notes())
	setPolicy("allkeys-lru")
	require.Contains(t, g.notes()["redis"], "maxmemory-policy allkeys-lru on redis may evict deadlines")
	setPolicy("allkeys-lru")
	require.Len(t, logs.FilterMessage("Redis may evict deadlines").All(), 1, "warned once, not at every check")

	health := newHealth(func(context.Context) map[string]error { return map[string]error{"redis": nil} }, HealthOptions{Interval: time.Hour})
	health.refresh(ctx)
	srv := httptest.NewServer(NewAPI(APIOptions{Health: health, Notes: g.notes, Token: "tok",
		HoldBack: func() holdback.Status { return holdback.Status{} }}))
	defer srv.Close()
	readyz := func(token string) (int, map[string]any) {
		code, body := callJSON(t, srv.URL, http.MethodGet, "/readyz", token, "")
		require.NotNil(t, body, "/readyz answers JSON")
		return code, body
	}
	code, body := readyz("tok")
	require.Equal(t, http.StatusOK, code, "a note does not make heartbeatd unready")
	require.Contains(t, body["notes"].(map[string]any)["redis"], "allkeys-lru")
	code, body = readyz("")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"redis": "see the log"}, body["notes"], "the why only with the token")

	setPolicy("noeviction")
	require.Empty(t, g.notes())
	_, body = readyz("tok")
	require.NotContains(t, body, "notes")
	require.Len(t, logs.FilterMessage("Redis maxmemory-policy no longer evicts deadlines").All(), 1)
}

// On Redis Cluster every master is read, and the note names the one that evicts.
func TestEvictionPolicyCluster(t *testing.T) {
	cluster := testenv.StartRedisCluster(t)
	rdb := cluster.Client(t)
	ctx := context.Background()
	var mu sync.Mutex
	var masters []string
	require.NoError(t, rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		masters = append(masters, c.Options().Addr)
		return nil
	}))
	slices.Sort(masters)
	one := redis.NewClient(&redis.Options{Addr: masters[0]})
	defer one.Close()
	require.NoError(t, one.ConfigSet(ctx, "maxmemory-policy", "allkeys-lfu").Err())
	g := newEvictionGuard(rdb, zap.NewNop())
	require.NoError(t, g.check(ctx))
	require.Contains(t, g.notes()["redis"], "allkeys-lfu on "+masters[0])
	for _, m := range masters[1:] {
		require.NotContains(t, g.notes()["redis"], m)
	}
}

// A Redis that refuses CONFIG (here an ACL user without it) leaves no note and no error: heartbeatd
// cannot tell, says so once, and runs. One that does not answer is an error, tried again later.
func TestEvictionPolicyUnreadable(t *testing.T) {
	srv := testenv.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "hb", "on", ">pw", "~*", "+@all", "-config").Err())
	limited := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "hb", Password: "pw"})
	defer limited.Close()
	core, logs := observer.New(zap.InfoLevel)
	g := newEvictionGuard(limited, zap.New(core))
	require.NoError(t, g.check(ctx))
	require.NoError(t, g.check(ctx))
	require.Empty(t, g.notes())
	require.Len(t, logs.FilterMessageSnippet("cannot read Redis maxmemory-policy").All(), 1)

	srv.Stop(t)
	require.Error(t, g.check(ctx))
}
