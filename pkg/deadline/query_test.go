package deadline_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/pkg/deadline"
)

func TestListCountDelete(t *testing.T) {
	eachFixture(t, 16, func(t *testing.T, f fixture) {
		ctx := context.Background()
		f.refresh(t, fleet(300, "d", f.clock.Now(), func(i int) string {
			if i%3 == 0 {
				return "sensor"
			}
			return "gateway"
		})...)
		f.clock.Advance(31 * time.Second) // the 200 gateways go silent
		for {
			res := f.claimAll(t, deadline.ClaimOptions{})
			if len(res.Claims) == 0 {
				break
			}
		}
		collect := func(opts deadline.ListOptions) []string {
			var all []string
			for {
				page, next, err := f.store.List(ctx, opts)
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
		online, interrupted, err := f.store.CountByType(ctx)
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"sensor": 100}, online)
		require.Equal(t, map[string]int64{"gateway": 200}, interrupted)
		counts, err := f.store.Count(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(200), counts.Interrupted, "the state hashes' guard field is not an incident")
		// Lookups in a listpack-encoded hash are linear scans; the guard keeps every state hash a hashtable.
		for slot := range 4 {
			enc, err := f.rdb.ObjectEncoding(ctx, f.store.Keys().State(slot)).Result()
			require.NoError(t, err)
			require.Equal(t, "hashtable", enc, "slot %d", slot)
		}
		_, _, err = f.store.List(ctx, deadline.ListOptions{Cursor: "garbage"})
		require.ErrorIs(t, err, deadline.ErrBadCursor)

		ok, err := f.store.Delete(ctx, "d1")
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = f.store.Delete(ctx, "d1")
		require.NoError(t, err)
		require.False(t, ok)
		counts, err = f.store.Count(ctx)
		require.NoError(t, err)
		require.Equal(t, deadline.Counts{Online: 100, Interrupted: 199, Pending: 199}, counts)
	})
}
