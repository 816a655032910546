package notify

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// The store keeps a device's notifications in order, hands each head to one process at a time, and
// leaves nothing once they are delivered: on a standalone Redis and on a cluster alike.
func TestStoreKeepsEachDevicesOrderAndLeavesNothingBehind(t *testing.T) {
	testenv.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := t.Context()
		st := &store{rdb: rdb, keys: newKeyspace("hb"), ttl: time.Hour}
		now := time.UnixMilli(1_795_340_000_000)
		note := func(dev string, kind event.Kind) pending {
			e := event.New(kind, dev, "meter", now, now.Add(-time.Minute), now, 0)
			return pending{Data: &Data{Event: e, Receiver: "noc", Incident: e.ID}, First: now.UnixMilli()}
		}
		require.NoError(t, st.Enqueue(ctx, "noc", note("a", event.Interrupted), now))
		require.NoError(t, st.Enqueue(ctx, "noc", note("a", event.Recovered), now))
		require.NoError(t, st.Enqueue(ctx, "noc", note("b", event.Interrupted), now.Add(time.Minute)))
		_, queued, err := st.State(ctx, "noc", "a")
		require.NoError(t, err)
		assert.True(t, queued)

		got, err := st.Claim(ctx, "noc", now, time.Minute, 10)
		require.NoError(t, err)
		require.Len(t, got, 1, "b is not due yet")
		assert.Equal(t, event.Interrupted, got[0].p.Data.Kind, "the oldest first")
		again, err := st.Claim(ctx, "noc", now, time.Minute, 10)
		require.NoError(t, err)
		assert.Empty(t, again, "leased: no second process gets it")

		got[0].p.Attempts++
		require.NoError(t, st.Retry(ctx, "noc", got[0], now.Add(time.Second)))
		got, err = st.Claim(ctx, "noc", now.Add(time.Second), time.Minute, 10)
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.Equal(t, 1, got[0].p.Attempts, "the attempt is kept")
		require.NoError(t, st.Settle(ctx, "noc", "a", got[0].raw, now.Add(time.Second)))
		got, err = st.Claim(ctx, "noc", now.Add(time.Second), time.Minute, 10)
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.Equal(t, event.Recovered, got[0].p.Data.Kind, "then the next")
		require.NoError(t, st.Settle(ctx, "noc", "a", got[0].raw, now.Add(time.Second)))

		later, err := st.Claim(ctx, "noc", now.Add(time.Minute), time.Minute, 10)
		require.NoError(t, err)
		require.Len(t, later, 1)
		require.NoError(t, st.Settle(ctx, "noc", "b", later[0].raw, now.Add(time.Minute)))
		waiting, err := st.Waiting(ctx, "noc")
		require.NoError(t, err)
		assert.Zero(t, waiting)
		for _, key := range []string{st.keys.queue("noc", "a"), st.keys.queue("noc", "b"), st.keys.due("noc")} {
			n, err := rdb.Exists(ctx, key).Result()
			require.NoError(t, err)
			assert.Zero(t, n, key)
		}

		// Incidents: an opening recorded, a kind added, a close only of what was opened.
		require.NoError(t, st.Opened(ctx, "noc", "a", "a/1/late/0", now, "late", false))
		require.NoError(t, st.Opened(ctx, "noc", "a", "a/2/interrupted/0", now, "interrupted", true))
		mark, _, err := st.State(ctx, "noc", "a")
		require.NoError(t, err)
		assert.Equal(t, "a/1/late/0|"+strconv.FormatInt(now.UnixMilli(), 10)+"|late,interrupted", mark)
		ttl, err := rdb.PTTL(ctx, st.keys.open("noc")).Result()
		require.NoError(t, err)
		assert.Positive(t, ttl, "the incidents a receiver was told of expire once unused")
		closed, err := st.Closed(ctx, "noc", "a")
		require.NoError(t, err)
		assert.Equal(t, "a/1/late/0", closed)
		closed, err = st.Closed(ctx, "noc", "a")
		require.NoError(t, err)
		assert.Empty(t, closed)

		// Folds: what a summary said is taken out, what came meanwhile stays.
		for range 3 {
			require.NoError(t, st.Fold(ctx, "noc", "interrupted", "a", now))
		}
		sum, err := st.Folded(ctx, "noc", time.Minute)
		require.NoError(t, err)
		require.NotNil(t, sum)
		assert.Equal(t, 3, sum.Count)
		require.NoError(t, st.Fold(ctx, "noc", "recovered", "b", now))
		require.NoError(t, st.SettleFold(ctx, "noc", sum))
		next, err := st.Folded(ctx, "noc", time.Minute)
		require.NoError(t, err)
		require.NotNil(t, next)
		assert.Equal(t, 1, next.Count)
		assert.Equal(t, map[string]int{"recovered": 1}, next.Kinds)
		assert.Equal(t, []string{"b"}, next.Devices)
	})
}
