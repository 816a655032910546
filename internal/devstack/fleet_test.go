package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heartbeatd/heartbeatd/configs"
	"github.com/heartbeatd/heartbeatd/internal/config"
)

func TestPlanFleetDefault(t *testing.T) {
	fleet, err := planFleet(FleetOptions{})
	require.NoError(t, err)
	require.Len(t, fleet, 300+1+stormBeacons+burstMeters+1, "the chance fleet, then the stories' devices")
	perType := map[string]int{}
	var silentForGood, recovering, flapping int
	for _, d := range fleet[:300] {
		perType[d.typ]++
		switch {
		case d.flap:
			flapping++
			require.GreaterOrEqual(t, d.flapSilent, 12*time.Second)
			require.GreaterOrEqual(t, d.flapSilent, 4*d.interval, "%s: silent long enough to pass its timeout", d.id)
		case d.recoverAt > 0:
			recovering++
			require.GreaterOrEqual(t, d.recoverAt-d.silentAt, 30*time.Second)
			require.Less(t, d.recoverAt-d.silentAt, 40*time.Second)
		case d.silentAt > 0:
			silentForGood++
		}
		if d.silentAt > 0 {
			require.GreaterOrEqual(t, d.silentAt, 5*time.Second)
			require.Less(t, d.silentAt, 15*time.Second)
		}
	}
	require.Equal(t, map[string]int{"gateway": 30, "tracker": 90, "temperature-sensor": 120, "default": 60}, perType)
	require.Equal(t, 8, silentForGood)
	require.Equal(t, 7, recovering)
	require.Equal(t, 2, flapping)
	require.Equal(t, "gw-001", fleet[0].id)
	require.Equal(t, "fleet/gateway/gw-001/telemetry", fleet[0].topic)
	require.Equal(t, "devices/dev-001/heartbeat", fleet[300-60].topic)

	again, err := planFleet(FleetOptions{})
	require.NoError(t, err)
	require.Equal(t, fleet, again, "the same seed tells the same story")
	other, err := planFleet(FleetOptions{Seed: 2})
	require.NoError(t, err)
	require.NotEqual(t, fleet, other)
}

// The failing pump reports a failure in every message from pumpFailFirst for pumpFailFor, then again
// every pumpFailEvery; its other messages are telemetry.
func TestFailingPumpReportsNowAndThen(t *testing.T) {
	fleet, err := planFleet(FleetOptions{})
	require.NoError(t, err)
	pump := fleet[len(fleet)-1]
	require.Equal(t, failingPump, pump.id)
	at := time.UnixMilli(1_795_341_600_000)
	fails := func(offset time.Duration) bool {
		return strings.Contains(string(pump.message(at, offset)), `"status":"fail"`)
	}
	require.False(t, fails(pumpFailFirst-time.Millisecond))
	require.True(t, fails(pumpFailFirst+time.Second))
	require.JSONEq(t, fmt.Sprintf(`{"ts":%d,"status":"fail","reason":%q}`, at.UnixMilli(), pumpReason), string(failure(at)))
	require.True(t, fails(pumpFailFirst+pumpFailFor-time.Millisecond))
	require.False(t, fails(pumpFailFirst+pumpFailFor), "then telemetry: it recovers")
	require.True(t, fails(pumpFailFirst+pumpFailEvery))
}

// TestPlanFleetStories: with the dev config, the gateway's beacons expire before it and so wait for its
// verdict (suppressed), the meters going dark are enough of one type within the correlation window for
// an outage, and every story's events, the last beacons' own interruption included, come within a
// minute.
func TestPlanFleetStories(t *testing.T) {
	cfg, err := config.Parse(configs.Dev, func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	pols := cfg.Policies()
	timeout := func(typ string) time.Duration {
		p, known := pols.Lookup(typ)
		require.True(t, known, "the dev config has no type %q", typ)
		return p.Timeout
	}
	fleet, err := planFleet(FleetOptions{})
	require.NoError(t, err)
	byType := map[string][]*simDevice{}
	var gateway *simDevice
	for _, d := range fleet[300:] {
		byType[d.typ] = append(byType[d.typ], d)
		if d.id == stormGateway {
			gateway = d
		}
		require.LessOrEqual(t, 3*d.interval, timeout(d.typ), "%s signals three times per timeout", d.id)
		require.True(t, d.silentAt > 0 || d.failAt > 0, "%s is a story's", d.id)
	}
	require.NotNil(t, gateway)
	require.Equal(t, "gateway", gateway.typ)
	require.Less(t, timeout("beacon"), timeout("gateway"), "beacons expire before their gateway")

	beacons := byType["beacon"]
	require.Len(t, beacons, stormBeacons)
	var stillDark int
	for _, b := range beacons {
		require.Equal(t, stormGateway, b.parent)
		require.Equal(t, gateway.silentAt, b.silentAt, "%s goes dark with its gateway", b.id)
		want := fmt.Sprintf(`{"ts":1000,"battery":%.1f,"parent":"gw-edge"}`, max(b.battery-0.01, 1))
		require.JSONEq(t, want, string(b.message(time.UnixMilli(1000), 0)), "%s names its gateway", b.id)
		if b.recoverAt == 0 {
			stillDark++
		} else {
			require.Equal(t, gateway.recoverAt, b.recoverAt)
		}
	}
	require.Equal(t, stormStillDark, stillDark)
	// The still-dark beacons alarm one beacon timeout after their gateway's return.
	require.Less(t, gateway.recoverAt+timeout("gateway")+timeout("beacon"), time.Minute)

	meters := byType["meter"]
	require.GreaterOrEqual(t, len(meters), cfg.Correlation.MinDevices)
	require.Contains(t, cfg.Correlation.By, config.CorrelateByType)
	for _, m := range meters {
		require.Equal(t, meters[0].silentAt, m.silentAt, "the meters go dark together")
		require.Empty(t, m.parent)
		// The last signals fall within one interval, and so do the interruptions.
		require.Less(t, m.interval, cfg.Correlation.Window)
	}
	require.Less(t, meters[0].silentAt+meterInterval+timeout("meter"), time.Minute, "outage_started within a minute")
	require.Less(t, meters[0].recoverAt, time.Minute, "outage_ended within a minute")
	require.Len(t, byType, 4, "gateway, beacon, meter, and the failing pump's type")
	require.Less(t, pumpFailFirst+pumpFailFor, time.Minute, "the pump's failure and recovery within a minute")
}

func TestPlanFleetCounts(t *testing.T) {
	fleet, err := planFleet(FleetOptions{Devices: 10, Types: []FleetType{{Name: "a", Interval: time.Second}, {Name: "b", Interval: time.Second}, {Name: "c", Interval: time.Second}}})
	require.NoError(t, err)
	require.Len(t, fleet, 10)
	silent := 0
	for _, d := range fleet {
		if d.silentAt > 0 && !d.flap {
			silent++
		}
	}
	require.Equal(t, 2, silent, "at least one silent for good and one that recovers")

	fleet, err = planFleet(FleetOptions{Devices: 999, Types: []FleetType{{Name: "gateway", Interval: time.Second, Count: 3}}})
	require.NoError(t, err)
	require.Len(t, fleet, 3, "counts win over Devices")

	_, err = planFleet(FleetOptions{Types: []FleetType{{Name: "x"}}})
	require.Error(t, err)
}

func TestSimDeviceSilent(t *testing.T) {
	s := time.Second
	steady := &simDevice{}
	gone := &simDevice{silentAt: 10 * s}
	back := &simDevice{silentAt: 10 * s, recoverAt: 40 * s}
	flap := &simDevice{silentAt: 10 * s, flap: true, flapSilent: 12 * s, flapOnline: 10 * s}
	tests := []struct {
		d    *simDevice
		at   time.Duration
		want bool
	}{
		{steady, time.Hour, false},
		{gone, 9 * s, false}, {gone, 10 * s, true}, {gone, time.Hour, true},
		{back, 39 * s, true}, {back, 40 * s, false},
		{flap, 9 * s, false}, {flap, 21 * s, true}, {flap, 22 * s, false}, {flap, 31 * s, false}, {flap, 32 * s, true}, {flap, 44 * s, false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, tt.d.silent(tt.at), "%+v at %v", *tt.d, tt.at)
	}
}

// skipClock runs with real time and can jump ahead.
type skipClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *skipClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}
func (c *skipClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

type received struct {
	mu       sync.Mutex
	byDevice map[string][][]byte
	topics   map[string]string
}

func (r *received) devices() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.byDevice) }
func (r *received) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byDevice[id])
}

func TestRunFleetPublishes(t *testing.T) {
	s := startStack(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	got := &received{byDevice: map[string][][]byte{}, topics: map[string]string{}}
	sub := mqttClient(t, s.MQTTBroker, "test-subscriber", true)
	defer sub.Disconnect(100)
	handler := func(_ paho.Client, m paho.Message) {
		parts := strings.Split(m.Topic(), "/")
		id := parts[1]
		if parts[0] == "fleet" {
			id = parts[2]
		}
		got.mu.Lock()
		got.byDevice[id] = append(got.byDevice[id], m.Payload())
		got.topics[id] = m.Topic()
		got.mu.Unlock()
	}
	require.NoError(t, waitToken(ctx, sub.SubscribeMultiple(map[string]byte{"fleet/+/+/telemetry": 1, "devices/+/heartbeat": 1}, handler), 5*time.Second))

	clk := &skipClock{}
	core, logs := observer.New(zap.InfoLevel)
	opts := FleetOptions{
		Broker: s.MQTTBroker, Logger: zap.New(core), now: clk.Now,
		Types: []FleetType{{Name: "gateway", Interval: 100 * time.Millisecond, Count: 30}, {Name: "default", Interval: 100 * time.Millisecond, Count: 10}},
	}
	plan, err := planFleet(opts)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- runFleet(ctx, opts) }()

	// Every device speaks, in its format.
	require.Eventually(t, func() bool { return got.devices() == 40 }, 10*time.Second, 10*time.Millisecond)
	got.mu.Lock()
	require.Equal(t, "fleet/gateway/gw-007/telemetry", got.topics["gw-007"])
	require.Equal(t, "devices/dev-003/heartbeat", got.topics["dev-003"])
	require.Empty(t, got.byDevice["dev-003"][0])
	var tele struct {
		TS      int64    `json:"ts"`
		Battery *float64 `json:"battery"`
	}
	require.NoError(t, json.Unmarshal(got.byDevice["gw-007"][0], &tele))
	require.InDelta(t, clk.Now().UnixMilli(), tele.TS, float64(time.Minute.Milliseconds()))
	require.NotNil(t, tele.Battery)
	got.mu.Unlock()

	// Past every planned silence start, the silent-for-good devices stop while the others go on.
	clk.Add(20 * time.Second)
	var gone, steady *simDevice
	for _, d := range plan {
		switch {
		case d.silentAt > 0 && d.recoverAt == 0 && !d.flap && gone == nil:
			gone = d
		case d.silentAt == 0 && steady == nil:
			steady = d
		}
	}
	require.NotNil(t, gone)
	require.Eventually(t, func() bool {
		return logs.FilterMessage("simulated device falls silent").FilterField(zap.String("device", gone.id)).Len() == 1
	}, 5*time.Second, 10*time.Millisecond)
	// The log line comes in the same tick as the last skipped send; whatever was in flight has arrived
	// once the steady device has spoken twice more.
	before := got.count(steady.id)
	require.Eventually(t, func() bool { return got.count(steady.id) >= before+2 }, 5*time.Second, 10*time.Millisecond)
	silentCount := got.count(gone.id)
	after := got.count(steady.id)
	require.Eventually(t, func() bool { return got.count(steady.id) >= after+3 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, silentCount, got.count(gone.id), "%s is silent", gone.id)

	// Past every planned return, a recovering device speaks again.
	var back *simDevice
	for _, d := range plan {
		if d.recoverAt > 0 {
			back = d
			break
		}
	}
	require.NotNil(t, back)
	backCount := got.count(back.id)
	clk.Add(40 * time.Second)
	require.Eventually(t, func() bool {
		return logs.FilterMessage("simulated device signals again").FilterField(zap.String("device", back.id)).Len() == 1 &&
			got.count(back.id) > backCount
	}, 5*time.Second, 10*time.Millisecond)

	cancel()
	require.NoError(t, <-done)
	require.Equal(t, 1, logs.FilterMessage("fleet simulator stopped").Len())
}

func TestRunFleetFailsWithoutBroker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := runFleet(ctx, FleetOptions{Broker: "tcp://127.0.0.1:1", Devices: 3})
	require.ErrorContains(t, err, "devstack: fleet connect")
}
