package devstack

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"go.uber.org/zap"
)

// FleetType is one kind of simulated device.
type FleetType struct {
	// Name is the device type. Devices of type "default" send an empty message on
	// devices/<id>/heartbeat (the topic names no type); the others send JSON telemetry on
	// fleet/<type>/<id>/telemetry.
	Name string
	// Interval between two signals of one device (±10% jitter). Keep it well under the type's timeout.
	Interval time.Duration
	// Count of devices; when every type's Count is 0, FleetOptions.Devices is spread over the types.
	Count int
}

// defaultFleet matches the dev config (timeouts: default 10s, gateway 5s,
// temperature-sensor 15s, tracker 8s, reported late after 5s): every device signals three times or more per timeout, so only the
// devices the simulator silences on purpose are reported. The default fleet also tells the stories of
// storm control (stories), with devices of its own.
var defaultFleet = []FleetType{
	{Name: "gateway", Interval: time.Second},
	{Name: "tracker", Interval: 2 * time.Second},
	{Name: "temperature-sensor", Interval: 5 * time.Second},
	{Name: "default", Interval: 3 * time.Second},
}

// defaultShares spreads a default fleet like a real one: few gateways, many sensors.
var defaultShares = map[string]int{"gateway": 1, "tracker": 3, "temperature-sensor": 4, "default": 2}

// FleetOptions configures runFleet.
type FleetOptions struct {
	Broker  string // tcp://host:port
	Devices int    // total when no type has a Count; 0 = 300
	Types   []FleetType
	// Seed chooses which devices fall silent and when; the same seed gives the same story. 0 = 1.
	Seed     uint64
	ClientID string // MQTT client id; "" = heartbeatd-dev-fleet
	Logger   *zap.Logger

	now func() time.Time // tests move time; nil = time.Now
}

// The story the simulated fleet tells, so that with the dev config `interrupted`, `alarm` and `recovered`
// events all show within a minute.
const (
	silentShare     = 0.05             // of the devices fall silent for good or for a while
	silentFrom      = 5 * time.Second  // they fall silent between silentFrom and silentFrom+silentSpread
	silentSpread    = 10 * time.Second //
	recoverAfter    = 30 * time.Second // half of them come back recoverAfter..+recoverSpread later: long
	recoverSpread   = 10 * time.Second // enough for one re-alarm of a gateway (5s + 15s)
	flappers        = 2                // devices that keep dropping out and coming back
	flapOnline      = 10 * time.Second // online phase of a flapper (+ up to 5s)
	flapSilentFloor = 12 * time.Second // silent phase: past the dev timeouts, at least 4 intervals (+ up to 3s)
)

// The stories of storm control (docs/concepts.md) the default fleet tells beside the chance silences above, with
// devices of their own, so that with the dev config `suppressed` and `outage_started` show within a
// minute:
//   - a gateway and the beacons behind it (on a shorter timeout: they expire first) go dark together:
//     the gateway is interrupted and every beacon suppressed; the gateway and all but a few beacons come
//     back, and those still dark alarm on their own one beacon timeout later;
//   - the meters of one feeder go dark together, more of one type than correlation.min_devices: one
//     outage_started; they come back and outage_ended follows.
const (
	stormGateway   = "gw-edge"
	stormBeacons   = 20
	stormStillDark = 3 // beacons that stay dark when their gateway returns
	stormAt        = 10 * time.Second
	stormBackAt    = 40 * time.Second
	beaconInterval = time.Second // the dev config's beacon timeout is 3s, the gateway's 5s
	burstMeters    = 60          // the dev config's correlation.min_devices is 50
	burstAt        = 15 * time.Second
	burstBackAt    = 45 * time.Second
	meterInterval  = 3 * time.Second // timeout 10s: their interruptions fall within the 10s window
)

// simDevice is one simulated device and its planned silences, as offsets from the fleet's start.
type simDevice struct {
	id, typ  string
	topic    string
	json     bool
	parent   string // named in every message's `parent` field (JSON only)
	interval time.Duration
	first    time.Duration // offset of the first signal, spreads the fleet over one interval
	battery  float64

	// A story's first device logs what its devices do (storyDark, storyBack) in place of its own line,
	// and the story's other devices (quiet) log theirs at debug.
	storyDark, storyBack string
	quiet                bool

	// silentAt > 0: silent from then on, until recoverAt when recoverAt > 0.
	silentAt, recoverAt time.Duration
	// flapping devices alternate: online until silentAt, silent for flapSilent, online for flapOnline, ...
	flap                   bool
	flapSilent, flapOnline time.Duration
	// failAt > 0: the messages from then on report a failure (failure) for failFor, and again every
	// failEvery (presence.go).
	failAt, failFor, failEvery time.Duration
}

// silent reports whether the device is silent at offset t since the fleet started.
func (d *simDevice) silent(t time.Duration) bool {
	if d.silentAt <= 0 || t < d.silentAt {
		return false
	}
	if d.flap {
		return (t-d.silentAt)%(d.flapSilent+d.flapOnline) < d.flapSilent
	}
	return d.recoverAt <= 0 || t < d.recoverAt
}

var typePrefixes = map[string]string{"gateway": "gw", "tracker": "trk", "temperature-sensor": "temp", "default": "dev"}

// telemetryDevice is a device that sends JSON telemetry on fleet/<type>/<id>/telemetry.
func telemetryDevice(id, typ string, interval, first time.Duration, battery float64) *simDevice {
	return &simDevice{id: id, typ: typ, topic: "fleet/" + typ + "/" + id + "/telemetry", json: true, interval: interval,
		first: first, battery: battery}
}

// planFleet builds the devices and chooses, from the seed, which of them fall silent and when.
func planFleet(opts FleetOptions) ([]*simDevice, error) {
	types := opts.Types
	if len(types) == 0 {
		types = defaultFleet
	}
	devices := opts.Devices
	if devices <= 0 {
		devices = 300
	}
	counts := make([]int, len(types))
	given := 0
	for i, t := range types {
		if t.Interval <= 0 {
			return nil, fmt.Errorf("devstack: fleet type %q: interval must be > 0", t.Name)
		}
		counts[i] = t.Count
		given += t.Count
	}
	if given == 0 {
		shares, total := make([]int, len(types)), 0
		for i, t := range types {
			shares[i] = 1
			if len(opts.Types) == 0 {
				shares[i] = defaultShares[t.Name]
			}
			total += shares[i]
		}
		left := devices
		for i := range types {
			counts[i] = devices * shares[i] / total
			left -= counts[i]
		}
		counts[0] += left
	}
	seed := opts.Seed
	if seed == 0 {
		seed = 1
	}
	rng := rand.New(rand.NewPCG(seed, 0x6865617274626561))
	var fleet []*simDevice
	for i, t := range types {
		prefix := typePrefixes[t.Name]
		if prefix == "" {
			prefix = t.Name
		}
		for n := 1; n <= counts[i]; n++ {
			id := fmt.Sprintf("%s-%03d", prefix, n)
			d := telemetryDevice(id, t.Name, t.Interval, time.Duration(rng.Int64N(int64(t.Interval))), 60+rng.Float64()*40)
			if t.Name == "default" {
				d.topic, d.json = "devices/"+d.id+"/heartbeat", false
			}
			fleet = append(fleet, d)
		}
	}
	// Silence: a seeded choice of 5% (at least 2), half of which recover, then a couple of flappers.
	nSilent := min(len(fleet), max(2, int(float64(len(fleet))*silentShare+0.5)))
	nFlap := min(flappers, len(fleet)-nSilent)
	jitter := func(d time.Duration) time.Duration { return time.Duration(rng.Int64N(int64(d))) }
	for k, idx := range rng.Perm(len(fleet))[:nSilent+nFlap] {
		d := fleet[idx]
		d.silentAt = silentFrom + jitter(silentSpread)
		switch {
		case k >= nSilent:
			d.flap = true
			d.flapSilent = max(flapSilentFloor, 4*d.interval) + jitter(3*time.Second)
			d.flapOnline = flapOnline + jitter(5*time.Second)
		case k%2 == 1:
			d.recoverAt = d.silentAt + recoverAfter + jitter(recoverSpread)
		}
	}
	if len(opts.Types) == 0 {
		fleet = append(fleet, stories(rng)...)
		fleet = append(fleet, failingPumpDevice())
	}
	return fleet, nil
}

// stories are the devices of the storm-control stories (see stormGateway), planned from rng.
func stories(rng *rand.Rand) []*simDevice {
	dev := func(id, typ string, interval time.Duration, silentAt, recoverAt time.Duration) *simDevice {
		d := telemetryDevice(id, typ, interval, time.Duration(rng.Int64N(int64(interval))), 60+rng.Float64()*40)
		d.silentAt, d.recoverAt = silentAt, recoverAt
		return d
	}
	gw := dev(stormGateway, "gateway", time.Second, stormAt, stormBackAt)
	gw.storyDark = fmt.Sprintf("simulated gateway %s goes dark with its %d beacons: expect it INTERRUPTED and each beacon SUPPRESSED",
		stormGateway, stormBeacons)
	gw.storyBack = fmt.Sprintf("simulated gateway %s returns with all but %d of its beacons: expect RECOVERED, and the %d still dark INTERRUPTED on their own",
		stormGateway, stormStillDark, stormStillDark)
	out := []*simDevice{gw}
	for n := 1; n <= stormBeacons; n++ {
		back := stormBackAt
		if n > stormBeacons-stormStillDark {
			back = 0
		}
		d := dev(fmt.Sprintf("beacon-%03d", n), "beacon", beaconInterval, stormAt, back)
		d.parent, d.quiet = stormGateway, true
		out = append(out, d)
	}
	for n := 1; n <= burstMeters; n++ {
		d := dev(fmt.Sprintf("meter-%03d", n), "meter", meterInterval, burstAt, burstBackAt)
		d.quiet = n > 1
		out = append(out, d)
	}
	meters := out[len(out)-burstMeters]
	meters.storyDark = fmt.Sprintf("%d simulated meters go dark together: expect OUTAGE_STARTED for device_type meter", burstMeters)
	meters.storyBack = fmt.Sprintf("the %d simulated meters return: expect OUTAGE_ENDED", burstMeters)
	return out
}

// message is what d sends at t, offset since the fleet started: nothing for a bare heartbeat, a failure
// when one is due, else JSON telemetry whose battery drains a little with every message.
func (d *simDevice) message(t time.Time, offset time.Duration) []byte {
	for d.failAt > 0 && offset >= d.failAt+d.failFor {
		d.failAt += d.failEvery
	}
	if d.failAt > 0 && offset >= d.failAt {
		return failure(t)
	}
	if !d.json {
		return nil
	}
	d.battery = max(d.battery-0.01, 1)
	payload := fmt.Appendf(nil, `{"ts":%d,"battery":%.1f`, t.UnixMilli(), d.battery)
	if d.parent != "" {
		payload = fmt.Appendf(payload, `,"parent":%q`, d.parent)
	}
	return append(payload, '}')
}

// logTransition logs that d fell silent or signals again: its story's line, its own, or at debug.
func logTransition(log *zap.Logger, d *simDevice, silent bool) {
	msg, story := "simulated device signals again", d.storyBack
	if silent {
		msg, story = "simulated device falls silent", d.storyDark
	}
	switch {
	case story != "":
		log.Info(story)
	case d.quiet:
		log.Debug(msg, zap.String("device", d.id), zap.String("type", d.typ))
	default:
		log.Info(msg, zap.String("device", d.id), zap.String("type", d.typ))
	}
}

// runFleet simulates a fleet publishing heartbeats over MQTT (QoS 1) until ctx is done, then returns nil.
// A seeded few of the devices fall silent after 5–15 s; half of those come back 30–40 s later, and two
// devices keep dropping out and coming back. The default fleet also has a gateway go dark with its
// beacons after 10 s and 60 meters after 15 s (stormGateway). Each silence and return is logged at info,
// every message at debug. It fails only when it cannot connect at all; a broker that goes away later is
// retried.
func runFleet(ctx context.Context, opts FleetOptions) error {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	log = log.With(zap.String("component", "fleet"))
	now := opts.now
	if now == nil {
		now = time.Now
	}
	fleet, err := planFleet(opts)
	if err != nil {
		return err
	}
	clientID := opts.ClientID
	if clientID == "" {
		clientID = "heartbeatd-dev-fleet"
	}

	mo := paho.NewClientOptions().AddBroker(opts.Broker).SetClientID(clientID).SetCleanSession(true).
		SetAutoReconnect(true).SetMaxReconnectInterval(time.Second).SetConnectTimeout(5 * time.Second).
		SetConnectionLostHandler(func(_ paho.Client, err error) {
			log.Warn("fleet lost the MQTT broker; reconnecting", zap.Error(err))
		})
	client := paho.NewClient(mo)
	if err := waitToken(ctx, client.Connect(), 10*time.Second); err != nil {
		return fmt.Errorf("devstack: fleet connect %s: %w", opts.Broker, err)
	}
	defer client.Disconnect(250)

	start := now()
	next := make([]time.Time, len(fleet))
	silent := make([]bool, len(fleet))
	plan := 0
	for i, d := range fleet {
		next[i] = start.Add(d.first)
		if d.silentAt > 0 {
			plan++
			log.Debug("fleet plan", zap.String("device", d.id), zap.String("type", d.typ), zap.Duration("silent_at", d.silentAt),
				zap.Duration("recover_at", d.recoverAt), zap.Bool("flapping", d.flap))
		}
	}
	log.Info("fleet simulator publishing", zap.String("broker", opts.Broker), zap.Int("devices", len(fleet)),
		zap.Int("falling_silent", plan))

	// One loop on a short tick: a few hundred devices need no timer each, and the tick bounds how late a
	// signal goes out (far below every timeout).
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	failing := false
	tokens := make([]paho.Token, 0, len(fleet))
	for {
		select {
		case <-ctx.Done():
			log.Info("fleet simulator stopped")
			return nil
		case <-ticker.C:
		}
		t := now()
		offset := t.Sub(start)
		tokens = tokens[:0]
		for i, d := range fleet {
			if s := d.silent(offset); s != silent[i] {
				silent[i] = s
				logTransition(log, d, s)
				if !s {
					next[i] = t // a device coming back (a reboot, a reconnect) speaks at once
				}
			}
			if t.Before(next[i]) {
				continue
			}
			// ±10% jitter; a device that fell far behind (the process stalled) starts afresh from now.
			step := d.interval*9/10 + time.Duration(rand.Int64N(int64(d.interval/5)+1))
			next[i] = next[i].Add(step)
			if next[i].Before(t) {
				next[i] = t.Add(step)
			}
			if silent[i] {
				continue
			}
			tokens = append(tokens, client.Publish(d.topic, 1, false, d.message(t, offset)))
			if ce := log.Check(zap.DebugLevel, "heartbeat published"); ce != nil {
				ce.Write(zap.String("device", d.id), zap.String("topic", d.topic))
			}
		}
		var pubErr error
		for _, tok := range tokens {
			if err := waitToken(ctx, tok, 5*time.Second); err != nil {
				pubErr = err
				break
			}
		}
		switch {
		case ctx.Err() != nil:
		case pubErr != nil && !failing:
			failing = true
			log.Warn("fleet cannot publish; retrying", zap.Error(pubErr))
		case pubErr == nil && failing:
			failing = false
			log.Info("fleet publishes again")
		}
	}
}

var errTokenTimeout = errors.New("timed out")

// waitToken waits for an MQTT operation, at most timeout and not past ctx.
func waitToken(ctx context.Context, tok paho.Token, timeout time.Duration) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return errTokenTimeout
	}
}
