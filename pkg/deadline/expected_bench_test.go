package deadline_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/pkg/config"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
)

// BenchmarkDeadlineOf is the Go side of timing one signal of a type timed by its timeout, the cost a
// schedule could add to every signal (docs/schedules.md), in one run: the store as before schedules
// (no Expected hook), the daemon's hook on a configuration without schedules, and on one where another
// type has a schedule.
func BenchmarkDeadlineOf(b *testing.B) {
	parse := func(yml string) *config.Policies {
		cfg, err := config.Parse([]byte(yml), func(string) (string, bool) { return "", false })
		require.NoError(b, err)
		return cfg.Policies()
	}
	plain := parse("types: {default: {timeout: 1m}, gateway: {timeout: 30s}}")
	scheduled := parse(`types: {default: {timeout: 1m}, gateway: {timeout: 30s}, meter: {schedule: "0 2 * * *"}}`)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"}) // never dialled: deadlineOf touches no Redis
	b.Cleanup(func() { _ = rdb.Close() })
	for _, c := range []struct {
		name     string
		pol      *config.Policies
		expected bool
	}{{"no-hook", plain, false}, {"hook-without-schedules", plain, true}, {"hook-with-a-scheduled-type", scheduled, true}} {
		opts := deadline.Options{Slots: 8, Timeout: func(typ string) time.Duration { p, _ := c.pol.Lookup(typ); return p.Timeout }}
		if c.expected {
			opts.Expected = c.pol.Expected
		}
		store, err := deadline.New(rdb, opts)
		require.NoError(b, err)
		seen := time.Now()
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, scheduled := store.DeadlineOf("gateway", seen); scheduled {
					b.Fatal("gateway has no schedule")
				}
			}
		})
	}
}
