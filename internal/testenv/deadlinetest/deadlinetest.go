// Package deadlinetest opens deadline stores for tests. It is apart from internal/testenv because
// internal/config's own tests import testenv, and internal/deadline imports internal/config: testenv must not import
// internal/deadline.
package deadlinetest

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

// NewStore is a deadline store on rdb with types registered, as the daemon has it once its policies are
// loaded; it fails tb on any error. The options carry what a suite varies: slots, clock, timeouts.
// internal/deadline's own tests use it from package deadline_test only (an in-package test would import cycle).
func NewStore(tb testing.TB, rdb redis.UniversalClient, opts deadline.Options, types ...string) *deadline.Store {
	tb.Helper()
	store, err := deadline.New(rdb, opts)
	if err != nil {
		tb.Fatalf("deadlinetest: deadline store: %v", err)
	}
	if err := store.Load(context.Background(), types...); err != nil {
		tb.Fatalf("deadlinetest: register types %v: %v", types, err)
	}
	return store
}
