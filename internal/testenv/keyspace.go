package testenv

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Key is one Redis key as a Keyspace snapshot sees it: its type and how many members it holds (the
// fields of a hash, the members of a set or sorted set, the elements of a list; 1 for a string).
type Key struct {
	Type    string
	Members int64
}

// Keyspace returns every key rdb holds (on each master of a cluster), with its type and size: for tests
// of what state heartbeatd leaves in Redis. A key that vanishes while it looks is left out.
func Keyspace(tb testing.TB, rdb redis.UniversalClient) map[string]Key {
	tb.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	out := map[string]Key{}
	read := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, "", 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			typ, err := c.Type(ctx, key).Result()
			if err != nil {
				return err
			}
			var n int64
			switch typ {
			case "none":
				continue
			case "string":
				n = 1
			case "hash":
				n, err = c.HLen(ctx, key).Result()
			case "set":
				n, err = c.SCard(ctx, key).Result()
			case "zset":
				n, err = c.ZCard(ctx, key).Result()
			case "list":
				n, err = c.LLen(ctx, key).Result()
			}
			if err != nil {
				return err
			}
			mu.Lock()
			out[key] = Key{Type: typ, Members: n}
			mu.Unlock()
		}
		return iter.Err()
	}
	var err error
	if c, ok := rdb.(*redis.ClusterClient); ok {
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return read(ctx, m) })
	} else {
		err = read(ctx, rdb)
	}
	if err != nil {
		tb.Fatalf("testenv: keyspace: %v", err)
	}
	return out
}

// KeysLike returns the keys of ks that start with prefix, sorted.
func KeysLike(ks map[string]Key, prefix string) []string {
	var out []string
	for k := range ks {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
