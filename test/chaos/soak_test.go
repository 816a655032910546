package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/invariant"
	"github.com/heartbeatd/heartbeatd/internal/slotlayout"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// The soak: a mixed fleet over two replicas sharing the signals (types with repeats, warnings, flapping,
// parents that change, quiet intervals and expected times; reported failures; devices whose network goes, so the broker
// publishes their last wills), random faults one after another (SIGKILL and SIGSTOP of a replica, Kafka,
// the broker or Redis down and back, a reload, the slots doubled by a rolling restart) and random operator acts (acks, silences, deletes, imports), for HB_SOAK_DURATION
// (default 30s; `make soak` runs 30m at HB_SOAK_DEVICES=2000) from the seed HB_SOAK_SEED (default: drawn
// and printed, so a failing run can be replayed). Its line carries the incident checker's verdict over
// every acknowledged signal and every event (docs/concepts.md#the-incident).

// soakTypes is the mixed fleet's types: repeats, warnings, flapping detection, parents, quiet intervals
// (soakQuietHours) and expected times.
var soakTypes = map[string]typeSpec{
	"gateway": {timeout: 4 * time.Second, rest: "repeat_every: 2s, max_repeats: 3"},
	"child":   {timeout: 3 * time.Second, rest: "repeat_every: 1s, max_repeats: 5"},
	"warned":  {timeout: 4 * time.Second, rest: "warn_after: 2s, repeat_every: 2s"},
	"flappy":  {timeout: 3 * time.Second, rest: "repeat_every: 1s, flapping: {count: 3, window: 30s}"},
	"sleepy":  {timeout: 3 * time.Second, rest: "repeat_every: 2s, quiet: [soak-quiet]"},
	// Expected every minute, with 3s of grace; its devices stay silent for 30–90s at a time.
	"minutely": {timeout: 30 * time.Second, rest: "repeat_every: 5s", schedule: "* * * * *", grace: 3 * time.Second},
}

// soakQuietHours is the time_intervals section of the soak's config: every third minute is quiet for the
// sleepy type, so its silences start incidents deferred to the interval's end, and signals inside the
// interval end them without an event.
func soakQuietHours() string {
	var b strings.Builder
	b.WriteString("time_intervals:\n  - name: soak-quiet\n    time_intervals:\n      - times:\n")
	for m := range 24 * 60 {
		// Alertmanager's ranges are minutes: a quiet minute in every three keeps each run's share.
		if m%3 == 0 {
			fmt.Fprintf(&b, "          - {start_time: \"%02d:%02d\", end_time: \"%02d:%02d\"}\n", m/60, m%60, (m+1)/60, (m+1)%60)
		}
	}
	return b.String()
}

// soakDevice is one device of the soak's fleet and how it behaves.
type soakDevice struct {
	id, typ string
	// quiet is how likely the device falls silent on a tick, for 1–3 timeouts; fails how likely it reports
	// a failure instead of signalling.
	quiet, fails float64
	parents      []string // the gateways a child moves between
	parent       string
	silentUntil  time.Time
}

func soakFleet(n int, rng *rand.Rand) []*soakDevice {
	gateways := max(n/50, 2)
	var out []*soakDevice
	for i := range gateways {
		out = append(out, &soakDevice{id: "gw-" + strconv.Itoa(i), typ: "gateway", quiet: 0.004})
	}
	var names []string
	for _, d := range out {
		names = append(names, d.id)
	}
	for i := range n - gateways {
		d := &soakDevice{id: "dev-" + strconv.Itoa(i)}
		switch i % 5 {
		case 0:
			switch i % 20 {
			case 0, 10:
				d.typ, d.quiet = "sleepy", 0.004
			case 5:
				d.typ, d.quiet = "minutely", 0.004
			default:
				d.typ, d.quiet = "default", 0
			}
		case 1:
			d.typ, d.quiet = "flappy", 0.01
		case 2:
			d.typ, d.quiet = "warned", 0.005
		case 3:
			d.typ, d.quiet, d.parents = "child", 0.003, names
			d.parent = names[rng.IntN(len(names))]
		case 4:
			d.typ, d.fails = "default", 0.002
		}
		out = append(out, d)
	}
	return out
}

// payload is what d sends on this tick: a signal naming its type (and parent), or a reported failure.
func (d *soakDevice) payload(rng *rand.Rand) []byte {
	if d.fails > 0 && rng.Float64() < d.fails {
		return []byte(`{"status":"fail","reason":"soak"}`)
	}
	if d.parents != nil && rng.Float64() < 0.01 {
		d.parent = d.parents[rng.IntN(len(d.parents))] // moved to another gateway
	}
	v := map[string]string{"type": d.typ}
	if d.parent != "" {
		v["parent"] = d.parent
	}
	b, _ := json.Marshal(v)
	return b
}

// soakSize is HB_SOAK_DEVICES, default 200: its own, so `make chaos` at 10,000 devices runs the soak at
// the size it is made for (one test publisher sends every device's signal twice a second).
func soakSize(t *testing.T) int { return sizeFrom(t, "HB_SOAK_DEVICES", 200) }

func soakSettings(t *testing.T) (time.Duration, uint64) {
	t.Helper()
	dur := 30 * time.Second
	if v := os.Getenv("HB_SOAK_DURATION"); v != "" {
		var err error
		dur, err = time.ParseDuration(v)
		require.NoError(t, err, "HB_SOAK_DURATION")
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("HB_SOAK_SEED"); v != "" {
		var err error
		seed, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "HB_SOAK_SEED")
	}
	return dur, seed
}

func TestChaosSoak(t *testing.T) {
	dur, seed := soakSettings(t)
	n := soakSize(t)
	t.Logf("chaos: soak seed=%d duration=%s devices=%d (HB_SOAK_SEED replays it)", seed, dur, n)
	rng := rand.New(rand.NewPCG(seed, 0))
	f := startFleet(t)
	// ownGrace: after a blind window each device waits its own timeout, so no false alarm is ever allowed.
	o := daemonOptions{sharedGroup: "soak", timeout: 3 * time.Second, typeSpecs: soakTypes, sweepEvery: 5 * time.Second, ownGrace: true,
		extra: soakQuietHours(), lastWills: true}
	replicas := make([]*testenv.Heartbeatd, 2)
	keepLogs(t, replicas)
	for i := range replicas {
		o.replica = "soak-" + string(rune('a'+i))
		replicas[i] = f.startDaemon(o)
	}
	fleet := soakFleet(n, rng)
	wills := f.willDevices(max(n/100, 4))
	willsAway := map[*willDevice]time.Time{}
	willDrop, drops := 0.01, 0 // how likely a will device's network goes on a tick
	p := f.publisher("soak-devices")
	var mu sync.Mutex // guards rng and fleet between the loops
	ctx, stop := context.WithTimeout(context.Background(), dur)
	defer stop()

	// The devices: every live device signals each tick; some fall silent for a while.
	tick := 500 * time.Millisecond
	signalling := repeatUntilStopped(tick, func() {
		mu.Lock()
		now := time.Now()
		var ids []string
		payloads := map[string][]byte{}
		for _, d := range fleet {
			if now.Before(d.silentUntil) {
				continue
			}
			if d.quiet > 0 && rng.Float64() < d.quiet {
				d.silentUntil = now.Add(time.Duration(1+rng.IntN(3)) * soakTimeout(d.typ))
				continue
			}
			ids = append(ids, d.id)
			payloads[d.id] = d.payload(rng)
		}
		var present []*willDevice
		for _, w := range wills {
			switch {
			case now.Before(willsAway[w]):
			case rng.Float64() < willDrop:
				// Its network goes: the broker publishes its will, and it stays away for 1–3 timeouts.
				w.drop()
				willsAway[w] = now.Add(time.Duration(1+rng.IntN(3)) * soakTimeout("default"))
				drops++
			default:
				present = append(present, w)
			}
		}
		mu.Unlock()
		if p.up() {
			_ = p.signal(ids, func(id string) []byte { return payloads[id] }) // a failed round is the broker's outage
		}
		for _, w := range present {
			if w.pub.up() {
				_ = w.pub.signal([]string{w.id}, func(string) []byte { return []byte(`{"type":"default"}`) })
			}
		}
	})
	defer signalling()

	faultKinds := soakFaultKinds(t)
	faults, acts := 0, 0
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // operator acts, every second or two
		defer wg.Done()
		for ctx.Err() == nil {
			mu.Lock()
			d := fleet[rng.IntN(len(fleet))]
			kind, pause := rng.IntN(soakActs), time.Duration(1000+rng.IntN(1000))*time.Millisecond
			hb := replicas[rng.IntN(len(replicas))]
			mu.Unlock()
			if soakAct(hb, kind, d.id, d.typ) {
				acts++
			}
			sleepCtx(ctx, pause)
		}
	}()
	for ctx.Err() == nil { // faults, one after another
		mu.Lock()
		kind, length, i := faultKinds[rng.IntN(len(faultKinds))], time.Duration(1000+rng.IntN(3000))*time.Millisecond, rng.IntN(len(replicas))
		pause := time.Duration(2000+rng.IntN(4000)) * time.Millisecond
		mu.Unlock()
		if soakFaults[kind] == "freeze" {
			// A pause past detection.lease may publish a stale repeat (docs/concepts.md, claim
			// protocol): the soak freezes past detection.stall, within the lease.
			length = min(length, chaosLease-250*time.Millisecond)
		}
		t.Logf("chaos: soak fault %s of replica %d for %s at %s", soakFaults[kind], i, length, time.Now().UTC().Format("15:04:05.000"))
		soakFault(t, f, replicas, i, kind, length)
		faults++
		waitReady(t, replicas[0])
		waitReady(t, replicas[1])
		sleepCtx(ctx, pause)
	}
	wg.Wait()

	// The faults are over: every device signals from now on, so every incident must end in its recovered
	// (a signal the broker took while heartbeatd's subscription was gone is followed by heard ones).
	mu.Lock()
	for _, d := range fleet {
		d.quiet, d.fails, d.silentUntil = 0, 0, time.Time{}
	}
	clear(willsAway)
	willDrop = 0
	mu.Unlock()
	// OpenIncidents, not Check: after half an hour Check reads millions of signals under the lock the
	// signallers record through, and polling it every second would stall the fleet it judges.
	closed := func() bool { return f.events.incidents.OpenIncidents() == 0 }
	if !pollEvery(scaled(n, 60*time.Second), time.Second, closed) {
		f.events.rereadAll(t) // judge what heartbeatd published, not what the streaming consumer delivered
	}
	require.True(t, closed(), "incidents still open while every device signals: %s", f.events.incidents.Check().Details(20))
	signalling()

	// Detection has scanned past everything once a barrier's devices are reported. They signal until
	// heartbeatd has stored them: the broker drops what it takes while no replica is subscribed.
	barrier := ids("barrier-soak", barrierDevices)
	require.True(t, pollEvery(30*time.Second, 500*time.Millisecond, func() bool {
		require.NoError(t, p.signal(barrier, nil))
		for _, id := range barrier {
			if device(t, replicas[0], id) == "" {
				return false
			}
		}
		return true
	}), "the barrier's signals were never stored")
	f.events.awaitReported(t, barrier, scaled(n, 60*time.Second))
	// Every other device may have had incidents: the checker judges them, not the tally's false count.
	f.events.rereadAll(t)
	r := f.events.tally(event.Interrupted, "soak", n, barrier)
	r.falses, r.detail = f.events.earlyInterruptions(), slices.DeleteFunc(r.detail, func(l string) bool { return strings.HasPrefix(l, "false ") })
	offline := f.events.interruptedBy(event.CauseOffline)
	r.figures = append(r.figures, fmt.Sprintf("seed=%d faults=%d acts=%d wills=%d offline=%d", seed, faults, acts, drops, offline))
	if drops >= 5 {
		require.Positive(t, offline, "%d last wills, and no interruption with cause offline", drops)
	}
	report(t, r, func() string { return mentions(r.incidents.Violations, replicas) }, replicas[0].LogTail, replicas[1].LogTail)
}

// keepLogs copies the replicas' whole logs into $HB_SOAK_LOGS when the soak fails, for the replay of a
// long run: the test's own directory goes with it.
func keepLogs(t *testing.T, replicas []*testenv.Heartbeatd) {
	dir := os.Getenv("HB_SOAK_LOGS")
	if dir == "" {
		return
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for i, hb := range replicas {
			if hb != nil {
				name := filepath.Join(dir, fmt.Sprintf("replica-%d.log", i))
				if err := os.WriteFile(name, []byte(hb.Log()), 0o644); err != nil {
					t.Logf("keep the logs: %v", err)
				}
			}
		}
	})
}

// mentions is what the replicas' logs say of the devices that broke a promise.
func mentions(violations []invariant.Violation, replicas []*testenv.Heartbeatd) string {
	var b strings.Builder
	seen := map[string]bool{}
	for _, v := range violations {
		if seen[v.Device] || len(seen) == 5 {
			continue
		}
		seen[v.Device] = true
		for i, hb := range replicas {
			for line := range strings.Lines(hb.Log()) {
				if strings.Contains(line, `"`+v.Device+`"`) {
					fmt.Fprintf(&b, "replica %d: %s", i, line)
				}
			}
		}
	}
	return b.String()
}

// soakTimeout is the timeout of type name in the soak.
func soakTimeout(name string) time.Duration {
	if spec, ok := soakTypes[name]; ok {
		return spec.timeout
	}
	return 3 * time.Second
}

// soakActs is how many kinds of act soakAct knows.
const soakActs = 4

// soakAct is one operator act on a replica's API: an ack, a short silence, a delete of device, or its
// import (registered again with its type and a label, as a fleet inventory is fed). It reports whether
// the API took it (an ack of a device without an incident is refused, as it should be).
func soakAct(hb *testenv.Heartbeatd, kind int, device, typ string) bool {
	var req *http.Request
	switch kind {
	case 3:
		req, _ = http.NewRequest(http.MethodPost, hb.HTTP+"/v1/devices:import",
			strings.NewReader(`{"device_id":"`+device+`","device_type":"`+typ+`","labels":{"site":"soak"}}`+"\n"))
		req.Header.Set("Content-Type", "application/x-ndjson")
	case 0:
		req, _ = http.NewRequest(http.MethodPost, hb.HTTP+"/v1/devices/"+device+"/ack", strings.NewReader(`{"by":"soak"}`))
	case 1:
		req, _ = http.NewRequest(http.MethodPost, hb.HTTP+"/v1/silences",
			strings.NewReader(`{"device_id":"`+device+`","for":"3s","comment":"soak"}`))
	default:
		req, _ = http.NewRequest(http.MethodDelete, hb.HTTP+"/v1/devices/"+device+"?by=soak", nil)
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode < 300
}

// soakFaults names the faults soakFault injects, by kind.
var soakFaults = []string{"kill", "freeze", "kafka-down", "mqtt-down", "redis-down", "reload", "double-slots"}

// soakFaultKinds is the faults the soak draws from: HB_SOAK_FAULTS (names from soakFaults, comma-separated)
// narrows them to replay one kind; all by default.
func soakFaultKinds(t *testing.T) []int {
	t.Helper()
	var kinds []int
	for _, name := range strings.Split(os.Getenv("HB_SOAK_FAULTS"), ",") {
		if name == "" {
			continue
		}
		i := slices.Index(soakFaults, strings.TrimSpace(name))
		require.GreaterOrEqual(t, i, 0, "HB_SOAK_FAULTS: %q is none of %v", name, soakFaults)
		kinds = append(kinds, i)
	}
	if len(kinds) == 0 {
		for i := range soakFaults {
			kinds = append(kinds, i)
		}
	}
	return kinds
}

// soakMaxSlots bounds the soak's slot doublings: 16 → 32 → 64.
const soakMaxSlots = 64

// slotsLine is redis.slots in a daemon's config.
var slotsLine = regexp.MustCompile(`slots: (\d+)`)

// doubleSlots doubles redis.slots by a rolling restart, one replica after the other as docs/scaling.md
// says, unless the fleet runs soakMaxSlots already or the previous doubling still settles (a replica
// would refuse to start: docs/scaling.md).
func doubleSlots(t *testing.T, f *fleet, replicas []*testenv.Heartbeatd) {
	t.Helper()
	layout := slotlayout.LayoutKey(config.DefaultKeyPrefix)
	previous, err := f.redis.Client(t).HGet(context.Background(), layout, "previous").Int()
	if err == nil && previous > 0 {
		t.Logf("chaos: soak double-slots skipped: the doubling from %d slots still settles", previous)
		return
	}
	for _, hb := range replicas {
		b, err := os.ReadFile(hb.ConfigPath())
		require.NoError(t, err)
		m := slotsLine.FindSubmatch(b)
		require.NotNil(t, m, "redis.slots in %s", hb.ConfigPath())
		n, _ := strconv.Atoi(string(m[1]))
		if n >= soakMaxSlots {
			return
		}
		require.NoError(t, os.WriteFile(hb.ConfigPath(), slotsLine.ReplaceAll(b, []byte("slots: "+strconv.Itoa(2*n))), 0o644))
		hb.Stop(t)
		hb.Start(t)
		waitReady(t, hb)
	}
}

// soakFault injects one fault of kind for length and undoes it: replica i SIGKILLed and restarted or
// frozen, Kafka, the MQTT broker or Redis down and back, a reload, or the slots doubled.
func soakFault(t *testing.T, f *fleet, replicas []*testenv.Heartbeatd, i, kind int, length time.Duration) {
	t.Helper()
	hb := replicas[i]
	switch kind {
	case 6:
		doubleSlots(t, f, replicas)
	case 0:
		hb.Kill(t)
		time.Sleep(length) // the fault's length is the fault itself
		hb.Start(t)
	case 1:
		freeze(t, hb.PID(), length, nil)
	case 2:
		f.kafka.Stop()
		time.Sleep(length)
		f.kafka.Start(t)
	case 3:
		f.broker.Kill(t)
		time.Sleep(length)
		f.broker.Start(t)
	case 4:
		f.redis.Kill(t)
		time.Sleep(length)
		f.redis.Start(t)
	default:
		hb.Signal(t, syscall.SIGHUP)
	}
}

// sleepCtx sleeps for d or until ctx ends: the soak's pacing between random acts.
func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
