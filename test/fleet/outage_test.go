package fleet

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// TestCorrelatedOutageIsOneEvent: 10k sensors of one type fall silent at once (a cell outage) while 200
// of the same type keep signalling; 100 more fall silent after the outage started. Expected: every
// sensor's `interrupted` (nothing lost), one `outage_started` for the type, the 100 late ones tagged with
// its id, no member repeat while the outage lasts, also after the replica holding the correlator lease
// is SIGKILLed; when 9k return, one `outage_ended`.
func TestCorrelatedOutageIsOneEvent(t *testing.T) {
	const repeatEvery = 2 * time.Second
	e := start(t, 2, fmt.Sprintf(`
types:
  default: {timeout: 6s, repeat_every: 0s}
  sensor:  {timeout: 6s, repeat_every: %s}
correlation: {by: [device_type], min_devices: 1000, window: 10s}
detection: {lease: 4s, grace_after_outage: 500ms}
`, repeatEvery), 2*time.Second)
	ctx := context.Background()
	first := testenv.DeviceIDs("cell", 10000)
	// Silent only after the outage started: whether any of the first 10k is claimed after it depends on
	// how fast the scanner drains them, these are.
	late := testenv.DeviceIDs("latecell", 100)
	members := append(slices.Clone(first), late...)
	keepers := testenv.DeviceIDs("keeper", 200)
	e.fleet.add(keepers, signal{typ: "sensor"})
	e.fleet.add(late, signal{typ: "sensor"})
	require.NoError(t, e.fleet.once(ctx, first, signal{typ: "sensor"}))
	e.awaitOnline(len(members) + len(keepers))

	group := []string{"outage:device_type:sensor"}
	e.await(60*time.Second, func() bool { return e.events.count(group, event.OutageStarted) == 1 }, func() string {
		return fmt.Sprintf("no outage_started; %d of %d members interrupted", e.events.count(first, event.Interrupted), len(first))
	})
	_, err := e.fleet.stop(ctx, late)
	require.NoError(t, err)
	started := time.Now()
	holder, err := redis.NewClient(&redis.Options{Addr: e.redis}).Get(ctx, "hb:correlator").Result()
	require.NoError(t, err)
	killed := 0
	if holder == "r2" {
		killed = 1
	}
	e.kill(killed)

	e.await(60*time.Second, func() bool { return e.events.count(members, event.Interrupted) == len(members) }, func() string {
		return fmt.Sprintf("%d of %d members interrupted", e.events.count(members, event.Interrupted), len(members))
	})
	// Two repeat intervals after the outage began: every member's repeat would have come due by now.
	for time.Since(started) < 2*repeatEvery+time.Second {
		time.Sleep(100 * time.Millisecond)
	}
	repeats := e.events.ids(members, event.Alarm)
	require.Empty(t, repeats, "no member repeats while the outage lasts")

	// The outage ends once fewer than half of its members are still silent (docs/concepts.md): all 10,100 joined
	// it, however few of them its count at outage_started held, so the 1,100 left silent end it.
	back := first[:9000]
	e.fleet.add(back, signal{typ: "sensor"})
	e.await(60*time.Second, func() bool { return e.events.count(group, event.OutageEnded) == 1 }, func() string {
		return fmt.Sprintf("no outage_ended; %d of %d returned members recovered", e.events.count(back, event.Recovered), len(back))
	})
	starts := e.events.ids(group, event.OutageStarted)
	require.Len(t, starts, 1, "one outage, announced once (duplicates of the same id aside)")
	falseKeep := e.events.ids(keepers, event.Interrupted, event.Alarm)
	require.Empty(t, falseKeep)
	require.Empty(t, e.events.Bad())
	outageID := e.events.outageID(group[0])
	require.Equal(t, len(late), e.events.tagged(late, outageID), "members interrupted after outage_started carry its id")
	tagged := e.events.tagged(members, outageID)
	lost := len(members) - e.events.count(members, event.Interrupted)
	t.Logf("chaos: correlated_outage members=%d interrupted=%d tagged=%d outage_started=%d member_repeats=%d outage_ended=%d killed=r%d lost=%d false=%d",
		len(members), e.events.count(members, event.Interrupted), tagged, len(starts), len(repeats), e.events.count(group, event.OutageEnded),
		killed+1, lost, len(repeats)+len(falseKeep)+len(starts)-1)
}
