// Package chaos is heartbeatd's fault suite: every scenario runs the real heartbeatd binary against real
// redis-server and mosquitto processes and an in-process kfake cluster, injects one fault (a killed
// daemon, a restarted server, a full Redis, bad input, …), and counts what was expected against what
// arrived on the event or dead-letter topic. Each scenario prints one line,
//
//	chaos: <scenario> devices=N expected=E got=G lost=L false=F dup=D
//
// and fails when anything was lost or falsely reported. HB_CHAOS_DEVICES sets the fleet size (default
// small so `go test ./...` stays quick; `make chaos` runs 10000), HB_CHAOS_LONG_OUTAGE the long Kafka
// outage (longKafkaOutage).
package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/schedule"
)

const (
	eventsTopic     = "heartbeat.events"
	deadletterTopic = "heartbeat.deadletter"
	// signalsTopic is the Kafka ingest topic of the scenarios that signal over Kafka (kafkaSignaller).
	signalsTopic = "heartbeat.signals"
	// timeout is every device's timeout in the expiry scenarios: short, so a scenario lasts seconds, and
	// long enough that a keeper signalling every timeout/5 never comes close to it on a loaded machine.
	timeout = 2 * time.Second
	// barrierDevices are signalled once after a fault is over; their interruptions prove that detection
	// has scanned past every deadline of the fault window (a false interruption of a keeper would have
	// been emitted by then). More than the slot count, so every slot holds one with high probability.
	barrierDevices = 32
	// slots is redis.slots of every daemon.
	slots = 16
)

// chaosLease is detection.lease of every chaos fleet: short, so a dead replica's claims come back within
// a scenario; the faults pause a replica for less (docs/concepts.md, claim protocol).
const chaosLease = 2 * time.Second

// fleetSize is HB_CHAOS_DEVICES, default 200: the whole package runs in about three minutes on two cores
// (and a minute more to build the skewed heartbeatd of TestChaosClockSkew without a build cache).
func fleetSize(t *testing.T) int { return sizeFrom(t, "HB_CHAOS_DEVICES", 200) }

// sizeFrom is the positive number the environment variable name holds, or def when it is unset.
func sizeFrom(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, name)
	require.Positive(t, n, name)
	return n
}

// scaled is a wait bound that grows with the fleet: base plus per device (a loaded 2-core machine moves
// a few thousand devices a second through MQTT, Redis and Kafka).
func scaled(n int, base time.Duration) time.Duration {
	return base + time.Duration(n)*2*time.Millisecond
}

// ids names n devices prefix-0 … prefix-(n-1).
func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + "-" + strconv.Itoa(i)
	}
	return out
}

// fleet is one scenario's servers and heartbeatd processes.
type fleet struct {
	t      *testing.T
	redis  *testenv.Redis
	broker *testenv.Mosquitto
	kafka  *testenv.Kafka
	events *collector
	// signals hands what the devices sent to the events' incident checker.
	signals signalLog
}

// startFleet starts Redis (AOF, so restarts lose nothing acknowledged), mosquitto and a persistent kfake
// with the event and dead-letter topics, and a collector reading both topics from the start.
func startFleet(t *testing.T) *fleet {
	t.Helper()
	f := &fleet{t: t}
	f.redis = testenv.StartRedis(t, testenv.RedisOptions{AOF: true})
	f.broker = testenv.StartMosquitto(t)
	f.kafka = testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{eventsTopic, deadletterTopic, signalsTopic}, Persist: true})
	f.events = newCollector(t, f.kafka)
	f.signals.checker = f.events.incidents
	return f
}

// maxLag is every daemon's ingest.max_lag: below the types' timeouts, so signals waiting in ingest (Redis
// down or full) count as an outage before a keeper's deadline can pass because of it. The incident
// checker takes a signal that heartbeatd may apply this late as in flight, not as missed.
const maxLag = time.Second

// daemonOptions vary the config between scenarios.
type daemonOptions struct {
	replica string        // replica id and MQTT client id; default "chaos"
	timeout time.Duration // default timeout
	grace   time.Duration // detection.grace_after_outage; default 1s
	// ownGrace leaves detection.grace_after_outage at 0: after a blind window each device waits its own
	// timeout (grace is ignored).
	ownGrace bool
	// types are further device types (name → timeout), without repeats like default.
	types map[string]time.Duration
	// typeSpecs are further device types with more than a timeout (the soak's mixed fleet).
	typeSpecs map[string]typeSpec
	// sharedGroup subscribes to the devices' topic as an MQTT shared subscription of that group, so
	// each signal reaches one of the replicas.
	sharedGroup string
	// kafkaIngest reads signals from signalsTopic too (kafkaSignaller), in a consumer group of the
	// replica's own, or kafkaGroup when set (replicas sharing the topic's partitions).
	kafkaIngest bool
	kafkaGroup  string
	// maxHoldBack, maxPublishAttempts and sweepEvery set detection's keys of those names; 0 = default.
	maxHoldBack        time.Duration
	maxPublishAttempts int
	sweepEvery         time.Duration
	// redisUser logs in to Redis as this ACL user (password redisPassword) instead of default.
	redisUser string
	// redisCluster, when set, is the Redis the daemon uses instead of the fleet's, under keyPrefix
	// (redis.key_prefix; "" = the default).
	redisCluster *testenv.RedisCluster
	keyPrefix    string
	// correlation is the correlation block's YAML flow mapping ("" = off).
	correlation string
	// extra is further top-level YAML (the soak's time_intervals).
	extra string
	// lastWills subscribes to the will devices' last wills as presence, with an offline grace of 1s
	// (below the types' timeouts, so a will moves a deadline earlier).
	lastWills bool
}

// typeSpec is a device type's timeout and the rest of its YAML flow mapping ("repeat_every: 1s, …"). A
// type with a schedule expects its devices at the schedule's times, each with grace (docs/schedules.md);
// its timeout is then only how long the soak keeps such a device silent.
type typeSpec struct {
	timeout  time.Duration
	rest     string
	schedule string
	grace    time.Duration
}

// yaml is the type's flow mapping in a daemon's config.
func (s typeSpec) yaml() string {
	if s.schedule != "" {
		return fmt.Sprintf("{schedule: %q, grace: %s, %s}", s.schedule, s.grace, s.rest)
	}
	return fmt.Sprintf("{timeout: %s, %s}", s.timeout, s.rest)
}

// redisPassword is the password of daemonOptions.redisUser.
const redisPassword = "chaos-secret"

// grantRedis gives the ACL user every command, and read access to every key; write access only to the
// keys one of writable matches (nil: every key).
func (f *fleet) grantRedis(user string, writable ...string) {
	f.t.Helper()
	if writable == nil {
		writable = []string{"*"}
	}
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">" + redisPassword, "&*", "+@all", "%R~*"}
	for _, p := range writable {
		args = append(args, "%RW~"+p)
	}
	require.NoError(f.t, f.redis.Client(f.t).Do(context.Background(), args...).Err())
}

func (f *fleet) config(o daemonOptions) string {
	if o.replica == "" {
		o.replica = "chaos"
	}
	if o.timeout == 0 {
		o.timeout = timeout
	}
	if o.grace == 0 {
		o.grace = time.Second
	}
	redis := fmt.Sprintf("{addrs: [%q], slots: %d", f.redis.Addr, slots)
	if o.redisCluster != nil {
		redis = fmt.Sprintf("{addrs: [%s], slots: %d", testenv.QuoteAll(o.redisCluster.Addrs), slots)
	}
	if o.keyPrefix != "" {
		redis += fmt.Sprintf(", key_prefix: %q", o.keyPrefix)
	}
	if o.redisUser != "" {
		redis += fmt.Sprintf(", username: %q, password: %q", o.redisUser, redisPassword)
	}
	configured := maps.Clone(o.types)
	if configured == nil {
		configured = map[string]time.Duration{}
	}
	configured["default"] = o.timeout
	scheduled := map[string]*schedule.Expected{}
	for name, spec := range o.typeSpecs {
		if spec.schedule == "" {
			configured[name] = spec.timeout
			continue
		}
		e, err := schedule.NewExpected(spec.schedule, time.UTC, spec.grace)
		require.NoError(f.t, err, name)
		scheduled[name] = e
	}
	f.signals.types(configured, scheduled)
	types := fmt.Sprintf("  default: {timeout: %s, repeat_every: 0s}\n", o.timeout)
	for _, name := range slices.Sorted(maps.Keys(o.types)) {
		types += fmt.Sprintf("  %s: {timeout: %s, repeat_every: 0s}\n", name, o.types[name])
	}
	for _, name := range slices.Sorted(maps.Keys(o.typeSpecs)) {
		types += fmt.Sprintf("  %s: %s\n", name, o.typeSpecs[name].yaml())
	}
	sub := `{topic: "devices/{device_id}/heartbeat"}`
	if o.sharedGroup != "" {
		sub = fmt.Sprintf(`{topic: "devices/{device_id}/heartbeat", shared_group: %q}`, o.sharedGroup)
	}
	offlineGrace := ""
	if o.lastWills {
		sub += ", " + presenceSubscription(o.sharedGroup)
		offlineGrace = "  offline_grace: 1s\n"
	}
	kafkaIngest := ""
	if o.kafkaIngest {
		if o.kafkaGroup == "" {
			o.kafkaGroup = "chaos-" + o.replica
		}
		kafkaIngest = fmt.Sprintf("  kafka: {enabled: true, brokers: [%q], topics: [%q], group_id: %q, session_timeout: 6s}\n",
			strings.Join(f.kafka.Addrs, ","), signalsTopic, o.kafkaGroup)
	}
	detection := fmt.Sprintf("{grace_after_outage: %s, lease: %s", o.grace, chaosLease)
	if o.ownGrace {
		detection = fmt.Sprintf("{lease: %s", chaosLease)
	}
	if o.maxHoldBack > 0 {
		detection += fmt.Sprintf(", max_hold_back: %s", o.maxHoldBack)
	}
	if o.maxPublishAttempts > 0 {
		detection += fmt.Sprintf(", max_publish_attempts: %d", o.maxPublishAttempts)
	}
	if o.sweepEvery > 0 {
		detection += fmt.Sprintf(", sweep_every: %s", o.sweepEvery)
	}
	// lease 2s: a killed daemon's claims are delivered again quickly. repeat_every 0: no repeats; the
	// suite counts interruptions and recoveries.
	return fmt.Sprintf(`
redis: %s}
types:
%singest:
  max_lag: %s
%s  mqtt:
    brokers: [%q]
    client_id: %q
    subscriptions: [%s]
%sevents:
  kafka: {brokers: [%q], topic: %q, deadletter_topic: %q}
detection: %s}
cluster: {replica_id: %q, replica_heartbeat: 250ms, slot_lease: 1s}
log: {level: info, format: console}
shutdown_timeout: 5s
%s`, redis, types, maxLag, offlineGrace, f.broker.Addr, o.replica, sub, kafkaIngest, strings.Join(f.kafka.Addrs, ","), eventsTopic, deadletterTopic,
		detection, o.replica, correlation(o.correlation)) + o.extra
}

// correlation is the config's correlation line for the flow mapping m ("" = none).
func correlation(m string) string {
	if m == "" {
		return ""
	}
	return "correlation: " + m + "\n"
}

// startDaemon starts heartbeatd and waits until it is ready (its MQTT subscription exists, so signals
// published from now on reach it).
func (f *fleet) startDaemon(o daemonOptions) *testenv.Heartbeatd {
	f.t.Helper()
	hb := f.launchDaemon(o, testenv.HeartbeatdOptions{})
	waitReady(f.t, hb)
	return hb
}

// launchDaemon starts heartbeatd (hb's binary and environment; its config is o's) and waits only until it
// answers /healthz: for a replica that is not meant to become ready.
func (f *fleet) launchDaemon(o daemonOptions, hb testenv.HeartbeatdOptions) *testenv.Heartbeatd {
	f.t.Helper()
	if o.redisUser != "" {
		f.grantRedis(o.redisUser)
	}
	hb.Config = f.config(o)
	return testenv.StartHeartbeatd(f.t, hb)
}

func waitReady(t *testing.T, hb *testenv.Heartbeatd) {
	t.Helper()
	require.NoError(t, hb.AwaitReady(context.Background(), 30*time.Second), hb.LogTail())
}

// scenario is one fault scenario's fleet, daemon and device signaller, and its n silent devices: the
// ones that must each be reported.
type scenario struct {
	*fleet
	n  int
	hb *testenv.Heartbeatd
	// p signals the silent and the barrier devices: MQTT unless the scenario switches it.
	p      signaller
	silent []string
}

// startScenario starts the fleet, one daemon with o, and the device publisher, for HB_CHAOS_DEVICES
// silent devices.
func startScenario(t *testing.T, o daemonOptions) *scenario {
	t.Helper()
	s := &scenario{fleet: startFleet(t), n: fleetSize(t)}
	s.hb = s.startDaemon(o)
	s.p = s.publisher("devices")
	s.silent = ids("silent", s.n)
	return s
}

// keepers makes max(n/share, 10) devices signal all along over MQTT (see keep) and returns them.
func (s *scenario) keepers(share int) []string {
	s.t.Helper()
	return s.keepersVia(nil, share)
}

// keepersVia is keepers signalling through sig (nil: an MQTT publisher of their own).
func (s *scenario) keepersVia(sig signaller, share int) []string {
	s.t.Helper()
	k := ids("keeper", max(s.n/share, 10))
	s.keep(sig, k)
	return k
}

// awaitStored waits until the daemon holds every silent device and every keeper (interrupted ones
// count: at 10k devices storing them all may take longer than a timeout).
func (s *scenario) awaitStored(keepers []string) {
	s.t.Helper()
	awaitStats(s.t, s.hb, scaled(s.n, 30*time.Second), "signals stored", func(st stats) bool {
		return st.Devices.Online+st.Devices.Interrupted >= int64(len(s.silent)+len(keepers))
	})
}

// finish awaits every silent device's report (within scaled(n, within)), proves with a barrier that
// detection scanned past the fault, and reports the tally under name, with the daemon's log on failure.
func (s *scenario) finish(name, barrier string, within time.Duration) {
	s.t.Helper()
	r := s.events.tallyInterrupted(name, s.n, s.settle(barrier, within))
	report(s.t, r, func() string { return explainLost(s.hb, r.lostIDs) }, s.hb.LogTail)
}

// explainLost is what the daemon says of a few lost devices and of itself: whether their signals were
// stored, with which deadline, and what held detection back.
func explainLost(hb *testenv.Heartbeatd, ids []string) string {
	var b strings.Builder
	for _, id := range ids[:min(len(ids), 3)] {
		code, body, err := hb.Get("/v1/devices/" + id)
		fmt.Fprintf(&b, "--- GET /v1/devices/%s: %d %s %v\n", id, code, strings.TrimSpace(body), err)
	}
	if len(ids) > 0 {
		code, body, err := hb.Get("/v1/stats")
		fmt.Fprintf(&b, "--- GET /v1/stats: %d %s %v\n", code, strings.TrimSpace(body), err)
		// What became of the signals it read: applied, late, coalesced, dead-lettered.
		if _, body, err := hb.Get("/metrics"); err == nil {
			for line := range strings.Lines(body) {
				if strings.HasPrefix(line, "heartbeatd_signals_total{") {
					b.WriteString(line)
				}
			}
		}
	}
	return b.String()
}

// settle is finish without the report: it returns the devices that must each have been reported, the
// silent ones and the barrier's, for a scenario that adds checks of its own to the tally.
func (s *scenario) settle(barrier string, within time.Duration) []string {
	s.t.Helper()
	s.events.awaitReported(s.t, s.silent, scaled(s.n, within))
	return concat(s.silent, s.barrier(s.p, barrier, scaled(s.n, 30*time.Second)))
}

// poll calls cond until it is true or within passes; it reports the last answer.
func poll(within time.Duration, cond func() bool) bool {
	return pollEvery(within, 20*time.Millisecond, cond)
}

// pollEvery is poll asking every so often: for a costly cond.
func pollEvery(within, every time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(every)
	}
}

// device is GET /v1/devices/{id}: its state, "" when heartbeatd does not know it.
func device(t *testing.T, hb *testenv.Heartbeatd, id string) string {
	t.Helper()
	code, body, err := hb.Get("/v1/devices/" + id)
	if err != nil || code == http.StatusNotFound {
		return ""
	}
	var v struct {
		State string `json:"state"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil {
		return ""
	}
	if v.State == "unknown" {
		return ""
	}
	return v.State
}

// stats is GET /v1/stats, the part the suite reads.
type stats struct {
	Devices struct {
		Online      int64 `json:"online"`
		Interrupted int64 `json:"interrupted"`
	} `json:"devices"`
	HoldBack struct {
		Active bool `json:"active"`
		ByType map[string]struct {
			Grace string `json:"grace"`
		} `json:"by_type"`
	} `json:"hold_back"`
	OwnedSlots []int `json:"owned_slots"`
	Slots      int   `json:"slots"`
	DeadClaims int64 `json:"dead_claims"`
	Parked     []struct {
		DeviceID string `json:"device_id"`
		Reason   string `json:"reason"`
	} `json:"parked"`
}

func getStats(hb *testenv.Heartbeatd) (stats, error) {
	var s stats
	code, body, err := hb.Get("/v1/stats")
	if err != nil {
		return s, err
	}
	if code != http.StatusOK {
		return s, fmt.Errorf("/v1/stats: %d %s", code, body)
	}
	return s, json.Unmarshal([]byte(body), &s)
}

// awaitStats polls /v1/stats until cond holds or within passes, failing the test then with the last
// answer and the daemon's log.
func awaitStats(t *testing.T, hb *testenv.Heartbeatd, within time.Duration, what string, cond func(stats) bool) stats {
	t.Helper()
	var last stats
	var lastErr error
	ok := poll(within, func() bool {
		last, lastErr = getStats(hb)
		return lastErr == nil && cond(last)
	})
	require.True(t, ok, "%s: last /v1/stats %+v (%v)\n%s", what, last, lastErr, hb.LogTail())
	return last
}

// readyz is GET /readyz: its status and body, each check by name ("ok" or, as no token is set, why
// not) besides "status" and "hold_back".
func readyz(hb *testenv.Heartbeatd) (int, map[string]any, error) {
	code, body, err := hb.Get("/readyz")
	if err != nil {
		return 0, nil, err
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		return code, nil, fmt.Errorf("/readyz: %w: %s", err, body)
	}
	return code, v, nil
}

// barrier signals fresh devices once and waits for their interruptions: once they are in, detection
// has scanned past every deadline older than theirs, so a false interruption of a keeper during the
// fault would have arrived. It returns the barrier devices, which belong to the expected set.
func (f *fleet) barrier(p signaller, scenario string, within time.Duration) []string {
	f.t.Helper()
	b := ids("barrier-"+scenario, barrierDevices)
	require.NoError(f.t, p.signal(b, nil))
	f.events.awaitReported(f.t, b, within)
	return b
}

// awaitQuarter waits until a quarter of the silent devices were reported: the expiry is under way, with
// claims in flight.
func (s *scenario) awaitQuarter() {
	s.t.Helper()
	require.True(s.t, poll(scaled(s.n, 30*time.Second), func() bool { return s.events.reported(s.silent) >= len(s.silent)/4 }),
		"expiry never got going\n%s", s.hb.LogTail())
}

// firstInterruption waits until some device was reported: the mass expiry has begun.
func (s *scenario) firstInterruption() {
	s.t.Helper()
	require.True(s.t, poll(30*time.Second, func() bool { return s.events.interruptedDevices() > 0 }),
		"no interruption at all\n%s", s.hb.LogTail())
}

// repeatUntilStopped calls round now and every period until the returned stop is called; stop returns
// once the last round is over, and may be called again.
func repeatUntilStopped(period time.Duration, round func()) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			round()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return sync.OnceFunc(func() { cancel(); <-done })
}

// concat joins id lists.
func concat(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}
