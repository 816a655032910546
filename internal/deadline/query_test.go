package deadline_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

func TestListCountDelete(t *testing.T) {
	eachFixture(t, 16, func(t *testing.T, f fixture) {
		ctx := context.Background()
		f.Refresh(t, fleet(300, "d", f.Clock.Now(), func(i int) string {
			if i%3 == 0 {
				return "sensor"
			}
			return "gateway"
		})...)
		f.Clock.Advance(31 * time.Second) // the 200 gateways go silent
		for {
			res := f.ClaimAll(t, deadline.ClaimOptions{})
			if len(res.Claims) == 0 {
				break
			}
		}
		collect := func(opts deadline.ListOptions) []string {
			var all []string
			for {
				page, next, err := f.Store.List(ctx, opts)
				require.NoError(t, err)
				for _, d := range page {
					all = append(all, d.ID)
				}
				if next == "" {
					return all
				}
				opts.Cursor = next
			}
		}
		require.Len(t, collect(deadline.ListOptions{Limit: 7}), 100)
		require.Len(t, collect(deadline.ListOptions{Limit: 7, Interrupted: true}), 200)
		require.Len(t, collect(deadline.ListOptions{Limit: 50, Interrupted: true, Type: "sensor"}), 0)
		online, interrupted, err := f.Store.CountByType(ctx)
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"sensor": 100}, online)
		require.Equal(t, map[string]int64{"gateway": 200}, interrupted)
		counts, err := f.Store.Count(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(200), counts.Interrupted, "the state hashes' guard field is not an incident")
		// Lookups in a listpack-encoded hash are linear scans; the guard keeps every state hash a hashtable.
		for slot := range 4 {
			enc, err := f.RDB.ObjectEncoding(ctx, f.Store.Keys().State(slot)).Result()
			require.NoError(t, err)
			require.Equal(t, "hashtable", enc, "slot %d", slot)
		}
		_, _, err = f.Store.List(ctx, deadline.ListOptions{Cursor: "garbage"})
		require.ErrorIs(t, err, deadline.ErrBadCursor)

		ok, err := f.Store.Delete(ctx, "d1")
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = f.Store.Delete(ctx, "d1")
		require.NoError(t, err)
		require.False(t, ok)
		counts, err = f.Store.Count(ctx)
		require.NoError(t, err)
		require.Equal(t, deadline.Counts{Online: 100, Interrupted: 199, Pending: 199}, counts)
	})
}

// TestListBoundsItsScanPerPage: a type filter that matches few devices returns short pages with a
// cursor instead of reading the fleet in one request, and still finds every match; a type no device
// can have reads nothing at all.
func TestListBoundsItsScanPerPage(t *testing.T) {
	eachFixture(t, 4, func(t *testing.T, f fixture) {
		ctx := context.Background()
		f.Refresh(t, fleet(2000, "d", f.Clock.Now(), func(i int) string {
			if i == 1999 {
				return "sensor"
			}
			return "gateway"
		})...)
		opts := deadline.ListOptions{Type: "sensor", Limit: 5}
		var found []string
		pages := 0
		for {
			page, next, err := f.Store.List(ctx, opts)
			require.NoError(t, err)
			pages++
			for _, d := range page {
				found = append(found, d.ID)
			}
			if next == "" {
				break
			}
			opts.Cursor = next
		}
		require.Equal(t, []string{"d1999"}, found)
		require.Greater(t, pages, 10, "2000 devices at most 50 read a page")

		scans := &commandCounter{name: "zscan"}
		f.RDB.AddHook(scans)
		page, next, err := f.Store.List(ctx, deadline.ListOptions{Type: "thermostat", Limit: 5})
		require.NoError(t, err)
		require.Empty(t, page)
		require.Empty(t, next)
		require.Zero(t, scans.n.Load(), "no device is a thermostat: nothing read")
	})
}

// commandCounter is a go-redis hook counting the commands named name a client sends.
type commandCounter struct {
	name string
	n    atomic.Int64
}

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == c.name {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if cmd.Name() == c.name {
				c.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}
