package deadline_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

func TestRefreshNeverMovesDeadlineBack(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		t0 := f.Clock.Now()
		f.Refresh(t, deadline.Signal{Device: "d1", Type: "gateway", Seen: t0.Add(10 * time.Second)})
		// An out-of-order signal, then a replay of the newest one.
		f.Refresh(t,
			deadline.Signal{Device: "d1", Type: "gateway", Seen: t0},
			deadline.Signal{Device: "d1", Type: "gateway", Seen: t0.Add(10 * time.Second)})
		d, found := f.device(t, "d1")
		require.True(t, found)
		require.Equal(t, t0.Add(40*time.Second).UnixMilli(), d.Deadline.UnixMilli())
		require.Equal(t, "gateway", d.Type)
	})
}

func TestUntypedSignalKeepsRecordedType(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		t0 := f.Clock.Now()
		f.Refresh(t, deadline.Signal{Device: "gw", Type: "gateway", Seen: t0})
		f.Refresh(t, deadline.Signal{Device: "gw", Seen: t0.Add(time.Second)}, deadline.Signal{Device: "new", Seen: t0})
		gw, _ := f.device(t, "gw")
		require.Equal(t, "gateway", gw.Type)
		require.Equal(t, t0.Add(31*time.Second).UnixMilli(), gw.Deadline.UnixMilli(), "untyped signal uses the recorded type's timeout")
		nd, _ := f.device(t, "new")
		require.Equal(t, "default", nd.Type)
		require.Equal(t, t0.Add(60*time.Second).UnixMilli(), nd.Deadline.UnixMilli())
	})
}

// An interrupted device whose claim nothing has acted on yet keeps its type for an untyped signal: the
// claim stores its state as the bare deadline score, and the refresh reads the type from that too.
func TestUntypedSignalOfJustClaimedDeviceKeepsItsType(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		f.Refresh(t, deadline.Signal{Device: "s", Type: "sensor", Seen: f.Clock.Now()})
		f.Clock.Advance(11 * time.Minute)
		c := f.ClaimAll(t, deadline.ClaimOptions{}).Claims
		require.Len(t, c, 1)
		require.Equal(t, "sensor", c[0].Type)
		seen := f.Clock.Now()
		f.Refresh(t, deadline.Signal{Device: "s", Seen: seen})
		d, _ := f.device(t, "s")
		require.Equal(t, "sensor", d.Type)
		require.Equal(t, seen.Add(10*time.Minute).UnixMilli(), d.Deadline.UnixMilli(), "the sensor timeout, not the default")
		require.NotNil(t, d.Incident, "the incident stays open until the alarm loop reports recovery")
		want := c[0].State
		want.Next, want.InterruptedAt = 1, want.Deadline // committed by the claim (see decodeState)
		require.Equal(t, want, *d.Incident)
	})
}

func TestRecoveryProbeMakesDormantIncidentDue(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		c := claimOne(t, f, "d")
		st := c.State
		st.Next, st.Exhausted = 3, true
		dormant := reschedule(c, st, time.Time{})
		dormant.Dormant = true
		f.ack(t, dormant)
		f.Clock.Advance(24 * time.Hour)
		res := f.ClaimAll(t, deadline.ClaimOptions{})
		require.Empty(t, res.Claims, "dormant: no act")
		require.True(t, res.NextAlarm.IsZero(), "a dormant entry is no next due")

		f.Refresh(t, deadline.Signal{Device: "d", Seen: f.Clock.Now()})
		res = f.ClaimAll(t, deadline.ClaimOptions{})
		require.Len(t, res.Claims, 1)
		require.Equal(t, c.State.Deadline, res.Claims[0].State.Deadline)
		require.True(t, res.Claims[0].State.Exhausted)
	})
}

func TestScriptsSurviveRedisLosingThem(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx := context.Background()
		f.Refresh(t, deadline.Signal{Device: "d", Seen: f.Clock.Now()})
		require.NoError(t, f.RDB.ScriptFlush(ctx).Err())
		f.Refresh(t, deadline.Signal{Device: "d", Seen: f.Clock.Now()})
		f.Clock.Advance(time.Hour)
		require.NoError(t, f.RDB.ScriptFlush(ctx).Err())
		require.Len(t, f.ClaimAll(t, deadline.ClaimOptions{}).Claims, 1)
	})
}

// A node that lost the scripts (restarted, failed over) while the others kept them: the calls the other
// nodes ran are not sent again, so no claim is run twice and lost. On a standalone server the one node is
// the server.
func TestClaimWhenOneNodeLostTheScripts(t *testing.T) {
	eachFixture(t, 64, func(t *testing.T, f fixture) {
		ctx := context.Background()
		sigs := fleet(640, "d", f.Clock.Now(), gateways)
		f.Refresh(t, sigs...)
		require.Empty(t, f.ClaimAll(t, deadline.ClaimOptions{}).Claims, "nothing due yet; every node has the scripts now")
		if cluster, ok := f.RDB.(*redis.ClusterClient); ok {
			var once sync.Once
			require.NoError(t, cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
				var err error
				once.Do(func() { err = node.ScriptFlush(ctx).Err() })
				return err
			}))
		} else {
			require.NoError(t, f.RDB.ScriptFlush(ctx).Err())
		}
		f.Clock.Advance(time.Minute)
		res := f.ClaimAll(t, deadline.ClaimOptions{Batch: 1000})
		require.Len(t, res.Claims, len(sigs), "every due device claimed in one wake-up")
	})
}
