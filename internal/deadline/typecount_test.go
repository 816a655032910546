package deadline_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/loop"
)

// CountTypesIn counts online devices and open incidents per type in the slots it is given: disjoint
// shares of the slots (one per replica) add up to the whole, which CountByType counts.
func TestCountTypesIn(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		types := []string{"gateway", "sensor", "default"}
		f.Refresh(t, fleet(30, "d-", f.Clock.Now(), func(i int) string { return types[i%3] })...)
		f.Clock.Advance(31 * time.Second) // the gateways' timeout passed, no other
		res := f.ClaimAll(t, deadline.ClaimOptions{})
		require.Len(t, res.Claims, 10)
		f.settle(t, res.Claims...)

		online, interrupted, err := f.Store.CountByType(ctx)
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"sensor": 10, "default": 10}, online)
		require.Equal(t, map[string]int64{"gateway": 10}, interrupted)

		sum := func(a, b map[string]int64) map[string]int64 {
			out := maps.Clone(a)
			for k, v := range b {
				out[k] += v
			}
			return out
		}
		var shares [2][]int
		for slot := range f.Store.Slots() {
			shares[slot%2] = append(shares[slot%2], slot)
		}
		on0, in0, err := f.Store.CountTypesIn(ctx, shares[0], loop.Pacer{})
		require.NoError(t, err)
		on1, in1, err := f.Store.CountTypesIn(ctx, shares[1], loop.Pacer{})
		require.NoError(t, err)
		require.Equal(t, online, sum(on0, on1))
		require.Equal(t, interrupted, sum(in0, in1))

		want := map[string]int64{}
		for i := range 30 {
			if id := fmt.Sprint("d-", i); i%3 != 0 && deadline.Slot(id, 8)%2 == 0 {
				want[types[i%3]]++
			}
		}
		require.Equal(t, want, on0, "only the devices of the slots asked for")
	})
}

// TestOwnTimeoutCountsUnderItsType: a device registered with its own timeout is recorded under a type
// of its own ("<type>@<timeout>"), yet it is listed and counted under its type, as operators filter.
func TestOwnTimeoutCountsUnderItsType(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		_, _, err := f.Store.Register(ctx, []string{"own", "plain"},
			[]deadline.Registration{{Type: "gateway", TimeoutMs: 6000}, {Type: "gateway"}}, []string{"", ""})
		require.NoError(t, err)

		online, _, err := f.Store.CountByType(ctx)
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"gateway": 2}, online)
		listed, _, err := f.Store.List(ctx, deadline.ListOptions{Type: "gateway", Limit: 10})
		require.NoError(t, err)
		ids := []string{}
		for _, d := range listed {
			ids = append(ids, d.ID)
		}
		require.ElementsMatch(t, []string{"own", "plain"}, ids)
	})
}
