package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// TestGatewayOutageIsOneAlarm: a gateway and its 200 sensors (on a shorter timeout: they expire first)
// go dark, and a replica is SIGKILLed while the sensors wait for the gateway's verdict. Expected: one
// `interrupted` for the gateway, one `suppressed` per sensor, no sensor repeat while the gateway is
// down; then the gateway and all but 3 sensors return: 3 `interrupted`, one sensor timeout after the
// gateway's return. Devices without a parent that keep signalling raise nothing.
func TestGatewayOutageIsOneAlarm(t *testing.T) {
	e := start(t, 2, `
types:
  default: {timeout: 4s, repeat_every: 0s}
  gateway: {timeout: 5s, repeat_every: 2s}
  sensor:  {timeout: 2s, repeat_every: 1s}
detection: {parent_wait: 2s, lease: 4s, grace_after_outage: 500ms}
`)
	ctx := context.Background()
	sensors := testenv.DeviceIDs("sensor", 200)
	keepers := testenv.DeviceIDs("keeper", 20)
	e.fleet.add([]string{"gw-1"}, signal{typ: "gateway"})
	e.fleet.add(sensors, signal{typ: "sensor", parent: "gw-1"})
	e.fleet.add(keepers, signal{})
	e.awaitOnline(1 + len(sensors) + len(keepers)) // every deadline, and with it every link, written

	dark, err := e.fleet.stop(ctx, append([]string{"gw-1"}, sensors...))
	require.NoError(t, err)
	// Mid-outage: the sensors have expired and wait for the gateway, whose deadline has not passed.
	for time.Since(dark) < 3*time.Second {
		time.Sleep(100 * time.Millisecond)
	}
	e.kill(1)

	e.await(40*time.Second, func() bool { return e.events.count(sensors, event.Suppressed) == len(sensors) }, func() string {
		return fmt.Sprintf("%d of %d sensors suppressed; gateway events %v", e.events.count(sensors, event.Suppressed), len(sensors),
			e.events.ids([]string{"gw-1"}, event.Interrupted, event.Alarm))
	})
	require.Equal(t, 1, e.events.count([]string{"gw-1"}, event.Interrupted))
	code, body, err := e.replicas[0].Get("/v1/devices/" + sensors[0])
	require.NoError(t, err)
	require.Equal(t, 200, code, body)
	var view struct {
		State      string `json:"state"`
		Parent     string `json:"parent"`
		Suppressed bool   `json:"suppressed"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &view))
	require.Equal(t, "interrupted", view.State)
	require.Equal(t, "gw-1", view.Parent)
	require.True(t, view.Suppressed, body)
	falseEarly := e.events.ids(sensors, event.Interrupted, event.Alarm, event.Exhausted)
	require.Empty(t, falseEarly, "no sensor pages while its gateway is down")

	// The gateway and 197 sensors come back; 3 stay dark.
	back, still := sensors[:197], sensors[197:]
	e.fleet.add([]string{"gw-1"}, signal{typ: "gateway"})
	e.fleet.add(back, signal{typ: "sensor", parent: "gw-1"})
	e.await(30*time.Second, func() bool { return e.events.count(still, event.Interrupted) == len(still) }, func() string {
		return fmt.Sprintf("%d of %d still-dark sensors interrupted", e.events.count(still, event.Interrupted), len(still))
	})
	e.await(30*time.Second, func() bool { return e.events.count(back, event.Recovered) == len(back) }, func() string {
		return fmt.Sprintf("%d of %d returned sensors recovered", e.events.count(back, event.Recovered), len(back))
	})
	require.Equal(t, 1, e.events.count([]string{"gw-1"}, event.Recovered))
	falseBack := e.events.ids(back, event.Interrupted, event.Alarm)
	falseKeep := e.events.ids(keepers, event.Interrupted, event.Suppressed, event.Alarm)
	require.Empty(t, falseBack, "the returned sensors alarm on their own")
	require.Empty(t, falseKeep, "devices that kept signalling")
	require.Empty(t, e.events.Bad())
	lost := len(sensors) - e.events.count(sensors, event.Suppressed) + len(still) - e.events.count(still, event.Interrupted)
	t.Logf("chaos: gateway_outage sensors=%d suppressed=%d gateway_interrupted=%d sensor_repeats_while_down=%d back_interrupted=%d lost=%d false=%d",
		len(sensors), e.events.count(sensors, event.Suppressed), e.events.count([]string{"gw-1"}, event.Interrupted), len(falseEarly),
		e.events.count(still, event.Interrupted), lost, len(falseEarly)+len(falseBack)+len(falseKeep))
}
