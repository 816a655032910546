package deadline_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

// The claims' leases and in-flight records (doc.go: lease, record): what a claim not yet published
// becomes when its holder dies, and when it finishes.

func TestUnacknowledgedClaimIsRedeliveredAfterLease(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		f.Refresh(t, deadline.Signal{Device: "d", Type: "gateway", Seen: f.Clock.Now()})
		f.Clock.Advance(31 * time.Second)
		first := f.ClaimAll(t, deadline.ClaimOptions{Lease: 5 * time.Second})
		require.Len(t, first.Claims, 1)
		f.Clock.Advance(4 * time.Second)
		require.Empty(t, f.ClaimAll(t, deadline.ClaimOptions{Lease: 5 * time.Second}).Claims, "still leased")
		f.Clock.Advance(time.Second)
		again := f.ClaimAll(t, deadline.ClaimOptions{Lease: 5 * time.Second})
		require.Len(t, again.Claims, 1)
		require.False(t, again.Claims[0].Fresh)
		requireSameState(t, first.Claims[0].State, again.Claims[0].State)
	})
}

// A plain fresh claim is stored as the interruption the alarm loop sends: releasing its record is its
// whole acknowledgement, after which nothing is redelivered and the next act is one repeat away.
func TestCommittedClaimIsSettledByReleasingItsRecord(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		f = withRepeats(t, f)
		ctx := context.Background()
		f.Refresh(t, deadline.Signal{Device: "g", Type: "gateway", Seen: f.Clock.Now()}, deadline.Signal{Device: "d", Type: "default", Seen: f.Clock.Now()})
		f.Clock.Advance(61 * time.Second)
		claimedAt := f.Clock.Now()
		res := f.ClaimAll(t, deadline.ClaimOptions{})
		require.Len(t, res.Claims, 2)
		for _, c := range res.Claims {
			require.True(t, c.Fresh)
			require.NotEmpty(t, c.Record, "%s: committed", c.Device)
			require.Zero(t, c.State.Next, "%s: handed out as nothing sent yet", c.Device)
		}
		inFlight, err := f.Store.Count(ctx)
		require.NoError(t, err)
		require.Equal(t, deadline.Counts{Interrupted: 2, Pending: 2}, inFlight, "the in-flight records are not counted as devices")
		f.settle(t, res.Claims...)

		g, _ := f.device(t, "g")
		require.Equal(t, 1, g.Incident.Next, "interrupted recorded as sent")
		require.Equal(t, claimedAt.Add(time.Minute).UnixMilli(), g.NextAct.UnixMilli(), "the first repeat one interval away")
		d, _ := f.device(t, "d")
		require.True(t, d.NextAct.IsZero(), "no repeats: dormant until it recovers")
		c, err := f.Store.Count(ctx)
		require.NoError(t, err)
		require.Equal(t, deadline.Counts{Interrupted: 2, Pending: 2}, c)

		f.Clock.Advance(59 * time.Second)
		require.Empty(t, f.ClaimAll(t, deadline.ClaimOptions{}).Claims, "released: nothing redelivered after the lease")
		f.Clock.Advance(time.Second)
		again := f.ClaimAll(t, deadline.ClaimOptions{}).Claims
		require.Equal(t, []string{"g"}, devices(again), "the repeat comes due")
		require.False(t, again[0].Fresh)
		require.Equal(t, 1, again[0].State.Next)
		require.Empty(t, again[0].Record)
	})
}

// A record whose lease ran out (its holder crashed before publishing) hands out again the claims still
// stored as committed, with their deadlines; claims that were acknowledged otherwise or deleted meanwhile
// are not handed out again.
func TestExpiredRecordRedeliversTheClaimsStillCommitted(t *testing.T) {
	eachFixture(t, 1, func(t *testing.T, f fixture) {
		f = withRepeats(t, f)
		var sigs []deadline.Signal
		for _, dev := range []string{"a", "b", "c"} {
			sigs = append(sigs, deadline.Signal{Device: dev, Type: "gateway", Seen: f.Clock.Now()})
		}
		f.Refresh(t, sigs...)
		f.Clock.Advance(31 * time.Second)
		first := f.ClaimAll(t, deadline.ClaimOptions{Lease: 5 * time.Second})
		require.Equal(t, []string{"a", "b", "c"}, devices(first.Claims))
		byDevice := map[string]deadline.Claim{}
		for _, c := range first.Claims {
			byDevice[c.Device] = c
		}
		deleted, err := f.Store.Delete(context.Background(), "b")
		require.NoError(t, err)
		require.True(t, deleted)
		c := byDevice["c"]
		st := c.State
		st.Failures, st.Reason = 1, "kafka down"
		require.Equal(t, []bool{true}, f.ack(t, reschedule(c, st, f.Clock.Now().Add(time.Hour))))

		f.Clock.Advance(4 * time.Second)
		require.Empty(t, f.ClaimAll(t, deadline.ClaimOptions{Lease: 5 * time.Second}).Claims, "still leased")
		f.Clock.Advance(time.Second)
		again := f.ClaimAll(t, deadline.ClaimOptions{Lease: 5 * time.Second})
		require.Equal(t, []string{"a"}, devices(again.Claims))
		require.False(t, again.Claims[0].Fresh, "a redelivery, re-checked like any due entry")
		require.NotEmpty(t, again.Claims[0].Record, "leased by a new record")
		requireSameState(t, byDevice["a"].State, again.Claims[0].State)
		f.settle(t, again.Claims...)
		f.Clock.Advance(10 * time.Second)
		require.Empty(t, f.ClaimAll(t, deadline.ClaimOptions{Lease: 5 * time.Second}).Claims, "settled")
	})
}

// TestCommittedClaimOfADeadProcessIsNotTakenForSent: a claim committed ahead of its publication whose
// process dies before publishing must be handed out again when its record's lease ends, even when the
// type's repeat comes due before that: the repeat must not take the unpublished interrupted for sent.
func TestCommittedClaimOfADeadProcessIsNotTakenForSent(t *testing.T) {
	eachFixture(t, 4, func(t *testing.T, f fixture) {
		f = withRepeats(t, f) // gateways repeat every minute
		lease := 2 * time.Minute
		f.Refresh(t, deadline.Signal{Device: "gw", Type: "gateway", Seen: f.Clock.Now()})
		f.Clock.Advance(31 * time.Second)
		res := f.ClaimAll(t, deadline.ClaimOptions{Lease: lease})
		require.Len(t, res.Claims, 1)
		require.NotEmpty(t, res.Claims[0].Record, "committed")
		// The process dies here: nothing published, the record never released.

		f.Clock.Advance(time.Minute + time.Second)
		require.Empty(t, f.ClaimAll(t, deadline.ClaimOptions{Lease: lease}).Claims, "its repeat waits for the record")
		f.Clock.Advance(lease)
		res = f.ClaimAll(t, deadline.ClaimOptions{Lease: lease})
		require.Len(t, res.Claims, 1, "handed out again once the record's lease ran out")
		c := res.Claims[0]
		require.Equal(t, []any{"gw", false, 0}, []any{c.Device, c.Fresh, c.State.Next}, "nothing sent yet: its interrupted goes out")
	})
}

// A device that signals while its committed claim's record is still in flight (the alarm loop has not
// published yet) gets its recovery claimed right after the record is released, not a lease later.
func TestSignalDuringCommittedClaimRecoversSoonAfterRelease(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		c := claimOne(t, f, "d") // committed, its record in flight
		require.NotEmpty(t, c.Record)
		f.Refresh(t, deadline.Signal{Device: "d", Seen: f.Clock.Now()}) // back: its probe makes the incident due
		require.Empty(t, f.ClaimAll(t, deadline.ClaimOptions{}).Claims, "whether interrupted went out is unknown yet")

		f.settle(t, c) // published: the record is released
		f.Clock.Advance(time.Second)
		res := f.ClaimAll(t, deadline.ClaimOptions{})
		require.Len(t, res.Claims, 1, "the recovery is claimed within a second of the release, not a lease (30 s) later")
		require.Equal(t, "d", res.Claims[0].Device)
		require.False(t, res.Claims[0].Fresh)
	})
}
