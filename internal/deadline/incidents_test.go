package deadline_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

// TestScanOpenIncidents: a scan in small pages returns every reported, unacknowledged incident of the
// slot once, with its type (a device with its own timeout as its type's) and that timeout; it skips
// acknowledged incidents, unreported ones and the state hash's guard field.
func TestScanOpenIncidents(t *testing.T) {
	eachFixture(t, 1, func(t *testing.T, f fixture) {
		ctx := context.Background()
		t0 := f.Clock.Now()
		_, _, err := f.Store.Register(ctx, []string{"own"}, []deadline.Registration{{Type: "gateway", TimeoutMs: 6000}}, []string{""})
		require.NoError(t, err)
		f.Refresh(t, fleet(10, "g-", t0, gateways)...)
		f.Refresh(t, deadline.Signal{Device: "own", Type: "gateway", Seen: t0},
			deadline.Signal{Device: "acked", Type: "gateway", Seen: t0}, deadline.Signal{Device: "fresh", Type: "gateway", Seen: t0})
		f.Clock.Advance(31 * time.Second)
		res := f.ClaimAll(t, deadline.ClaimOptions{})
		var acks []deadline.Ack
		for _, c := range res.Claims {
			st := sentOnce(c)
			if c.Device == "fresh" {
				st.Next = 0 // its interruption is not reported yet
			}
			acks = append(acks, reschedule(c, st, f.Clock.Now().Add(time.Hour)))
		}
		_, err = f.Store.Settle(ctx, acks, deadline.RecordsOf(res.Claims))
		require.NoError(t, err)
		ok, err := f.Store.SetAcked(ctx, "acked", 0)
		require.NoError(t, err)
		require.True(t, ok)

		var got []string
		byDevice := map[string]deadline.OpenIncident{}
		for cursor, pages := uint64(0), 0; ; pages++ {
			require.Less(t, pages, 100, "the scan ends")
			page, next, err := f.Store.ScanOpenIncidents(ctx, 0, cursor, 2)
			require.NoError(t, err)
			for _, inc := range page {
				if _, seen := byDevice[inc.Device]; !seen {
					got = append(got, inc.Device)
				}
				byDevice[inc.Device] = inc
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
		sort.Strings(got)
		require.Equal(t, []string{"g-0", "g-1", "g-2", "g-3", "g-4", "g-5", "g-6", "g-7", "g-8", "g-9", "own"}, got)
		own := byDevice["own"]
		require.Equal(t, "gateway", own.Type)
		require.Equal(t, 6*time.Second, own.Timeout)
		require.Equal(t, own.State.DeadlineTime().Add(-6*time.Second), own.LastSeen())
		require.Equal(t, 30*time.Second, byDevice["g-0"].Timeout)
		require.Equal(t, t0.UnixMilli(), byDevice["g-0"].LastSeen().UnixMilli())
	})
}

// An incident a claim committed ahead of its publication is not reported until its record is released:
// a reader of the open incidents (the Alertmanager re-sync) would otherwise act on it before the alarm
// loop has judged it, without the outage or parent that explains it.
func TestScanOpenIncidentsWaitsForTheCommittedClaimsRecord(t *testing.T) {
	eachFixture(t, 1, func(t *testing.T, f fixture) {
		ctx := context.Background()
		f.Refresh(t, deadline.Signal{Device: "d", Type: "gateway", Seen: f.Clock.Now()})
		f.Clock.Advance(31 * time.Second)
		res := f.ClaimAll(t, deadline.ClaimOptions{})
		require.Len(t, res.Claims, 1)
		require.NotEmpty(t, res.Claims[0].Record, "committed under an in-flight record")
		open := func() []deadline.OpenIncident {
			page, next, err := f.Store.ScanOpenIncidents(ctx, 0, 0, 100)
			require.NoError(t, err)
			require.Zero(t, next)
			return page
		}
		require.Empty(t, open(), "its interrupted is not out yet")
		f.settle(t, res.Claims...)
		page := open()
		require.Len(t, page, 1, "published and released: reported")
		require.Equal(t, "d", page[0].Device)
	})
}
