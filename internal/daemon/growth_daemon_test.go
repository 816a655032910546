package daemon

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// What a device or client can make Redis hold is bounded per device, and every key family has a lifetime
// (docs/concepts.md, "Slot layout"): these tests drive a whole daemon over HTTP and read what Redis holds.

// growthDaemon is one heartbeatd on redis-server and Kafka (kfake), its HTTP API open to loopback (no
// tokens: an admin), restartable.
type growthDaemon struct {
	base  string
	rdb   redis.UniversalClient
	kafka *testenv.Kafka
	path  string
	stop  func()
}

func startGrowthDaemon(t *testing.T, sections string) *growthDaemon {
	t.Helper()
	srv := testenv.StartRedis(t)
	kafka := testenv.StartKafka(t, testenv.KafkaOptions{Topics: []string{testenv.SignalsTopic, testenv.EventsTopic, testenv.DeadLetterTopic}})
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	servers := testenv.KafkaReplicaConfig{Redis: srv.Addr, Slots: 4, Kafka: kafka.Addrs, Replica: "growth"}
	g := &growthDaemon{base: "http://" + httpAddr, rdb: srv.Client(t), kafka: kafka, path: filepath.Join(t.TempDir(), "heartbeatd.yaml")}
	require.NoError(t, os.WriteFile(g.path, []byte(servers.YAML(sections+fmt.Sprintf(`
http: {listen: %q}
shutdown_timeout: %s
`, httpAddr, shutdownTimeout))), 0o600))
	g.start(t)
	return g
}

// start runs the daemon until stop or the end of the test, and returns once it is ready.
func (g *growthDaemon) start(t *testing.T) {
	t.Helper()
	g.stop = startDaemon(t, g.path)
	awaitReadyz(t, g.base)
}

// post sends NDJSON lines to POST /v1/signals and requires every one accepted.
func (g *growthDaemon) post(t *testing.T, lines ...string) {
	t.Helper()
	code, out := callJSON(t, g.base, "POST", "/v1/signals", "", strings.Join(lines, "\n"))
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.EqualValues(t, len(lines), out["accepted"], "%v", out)
}

// events counts the events published so far by device and kind ("s1 interrupted").
func (g *growthDaemon) events(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, r := range g.kafka.ReadUntil(t, testenv.EventsTopic, 100*time.Millisecond, func([]testenv.Record) bool { return false }) {
		e, err := event.Decode(r.Value)
		require.NoError(t, err)
		out[e.DeviceID+" "+string(e.Kind)]++
	}
	return out
}

// awaitEvents waits until every want ("s1 interrupted": n) has been published at least n times.
func (g *growthDaemon) awaitEvents(t *testing.T, want map[string]int) {
	t.Helper()
	var got map[string]int
	require.Eventually(t, func() bool {
		got = g.events(t)
		for k, n := range want {
			if got[k] < n {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "want %v", want)
}

// members sums the members of keys (see testenv.Key), leaving out the keys named in except.
func members(ks map[string]testenv.Key, except ...string) int64 {
	var n int64
	for k, v := range ks {
		if !slices.Contains(except, k) {
			n += v.Members
		}
	}
	return n
}

// hashTag is the {…} of a key, which names its slot, bucket or parent.
var hashTag = regexp.MustCompile(`\{[^}]*\}`)

// families sums keys by family (their hash tags left out): how many keys, how many members.
func families(ks map[string]testenv.Key) string {
	type sum struct{ keys, members int64 }
	by := map[string]sum{}
	for k, v := range ks {
		f := hashTag.ReplaceAllString(k, "{…}")
		by[f] = sum{by[f].keys + 1, by[f].members + v.Members}
	}
	var out []string
	for f, n := range by {
		out = append(out, fmt.Sprintf("  %s %d×%d", f, n.keys, n.members))
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// retypedLog is the fleet-wide log of devices whose type changed (internal/typememory): a ring
// capped at retypedLogCap entries, whatever the devices send.
const (
	retypedLog    = "hb:{retyped}"
	retypedLogCap = 10_000
)

// TestOneDeviceCannotGrowRedis: one device sends 10,000 messages over HTTP, each naming a new parent and
// another of the configured types, and every hundredth a failure with a new reason (100 incidents, each
// recovered by the next batch; it flaps). What Redis holds for it is a constant: a few keys and members
// more than before it spoke (10 and 12 or so, logged), no more after 10,000 messages than after 1,000
// (the retyped log, a fleet-wide ring of at most 10,000 entries, counted apart). It used to keep a
// children set and a named-parent entry for every parent it ever named.
func TestOneDeviceCannotGrowRedis(t *testing.T) {
	g := startGrowthDaemon(t, `
types:
  default: {timeout: 1h, repeat_every: 1h}
  meter:   {timeout: 1h, repeat_every: 1h, flapping: {count: 3, window: 1h}}
  valve:   {timeout: 2h, repeat_every: 1h, flapping: {count: 3, window: 30m}}
  pump:    {timeout: 3h, repeat_every: 0s, flapping: {count: 3, window: 2h}}
detection: {grace_after_outage: 100ms}
`)
	types := []string{"meter", "valve", "pump"}
	before := testenv.Keyspace(t, g.rdb)
	start := time.Now().Add(-15 * time.Second) // every ts in the past, each later than the one before
	const messages, perBatch = 10_000, 100
	var at1000 map[string]testenv.Key
	for b := range messages / perBatch {
		lines := make([]string, 0, perBatch)
		for i := b * perBatch; i < (b+1)*perBatch-1; i++ {
			lines = append(lines, fmt.Sprintf(`{"device_id":"roamer","type":%q,"parent":"gw-%d","ts":%d}`,
				types[i%len(types)], i, start.Add(time.Duration(i)*time.Millisecond).UnixMilli()))
		}
		// Last in its batch, so no later signal of the batch makes it late: the device is interrupted
		// at once, with this reason, and its next batch recovers it.
		i := (b+1)*perBatch - 1
		lines = append(lines, fmt.Sprintf(`{"device_id":"roamer","status":"fail","reason":"reason-%d","ts":%d}`,
			b, start.Add(time.Duration(i)*time.Millisecond).UnixMilli()))
		g.post(t, lines...)
		// Each failure is an incident of its own: the next batch recovers it.
		var view map[string]any
		require.Eventually(t, func() bool {
			_, view = callJSON(t, g.base, "GET", "/v1/devices/roamer", "", "")
			return view["state"] == "interrupted" && view["reason"] == fmt.Sprint("reason-", b) && view["interrupted_at"] != nil
		}, 30*time.Second, 5*time.Millisecond, "batch %d's failure reported; the device shows %v", b, &view) // generous: a loaded CI host stalls, and a stall holds detection back
		if (b+1)*perBatch == 1000 {
			at1000 = testenv.Keyspace(t, g.rdb)
		}
	}
	g.awaitEvents(t, map[string]int{"roamer interrupted": messages / perBatch, "roamer recovered": messages/perBatch - 1, "roamer flapping": 1})
	after := testenv.Keyspace(t, g.rdb)
	t.Logf("events: %v", g.events(t))
	t.Logf("by family, keys×members\nbefore:\n%s\nafter 1,000 messages:\n%s\nafter 10,000:\n%s", families(before), families(at1000), families(after))

	// A device's own keys: its deadline or incident and alarm entry, an in-flight record while a claim
	// of it is handled, its cause, its flap history, its link, its parent's children set and named
	// entry; and the fleet-wide marks and counters its first messages created.
	require.LessOrEqual(t, len(after)-len(before), 16, "keys")
	require.LessOrEqual(t, members(after, retypedLog)-members(before, retypedLog), int64(24), "members")
	require.LessOrEqual(t, len(after), len(at1000)+2, "keys: no more after 10,000 messages than after 1,000 (+ an in-flight record and its lease)")
	require.LessOrEqual(t, members(after, retypedLog), members(at1000, retypedLog)+3, "members: as after 1,000 messages")
	require.LessOrEqual(t, after[retypedLog].Members, int64(retypedLogCap))

	// The link is the last parent named, and only it names the device.
	children := testenv.KeysLike(after, "hb:children:")
	require.Equal(t, []string{"hb:children:{gw-9998}"}, children)
	require.Equal(t, []string{"roamer"}, g.rdb.SMembers(context.Background(), children[0]).Val())
	var named int64
	for _, k := range testenv.KeysLike(after, "hb:parents:named:") {
		named += after[k].Members
	}
	require.EqualValues(t, 1, named, "one named parent")

	// Deleted, it leaves no per-device key behind: only the fleet-wide ones its messages created.
	code, _ := callJSON(t, g.base, "DELETE", "/v1/devices/roamer", "", "")
	require.Equal(t, http.StatusNoContent, code)
	awaitOnlyFleetWide(t, g.rdb, 10*time.Second)
}

// fleetWideKeys are the key families a fleet keeps whatever its devices, each with what it may hold:
// nothing that grows with the devices or their messages. Every other key belongs to some device and
// must be gone once every device is deleted or forgotten.
var fleetWideKeys = []struct {
	pattern *regexp.Regexp
	holds   string
}{
	{regexp.MustCompile(`^hb:layout$`), "the slot count and epoch"},
	{regexp.MustCompile(`^hb:types$`), "type name → index, at most 1024"},
	{regexp.MustCompile(`^hb:\{\d+\}:epoch$`), "the layout's epoch, per slot"},
	{regexp.MustCompile(`^hb:\{\d+\}:state$`), "per slot: only its hashtable guard field (checked below)"},
	{regexp.MustCompile(`^hb:owner:\{\d+\}$`), "a slot's lease"},
	{regexp.MustCompile(`^hb:replicas$`), "the live replicas"},
	{regexp.MustCompile(`^hb:alive$`), "the replicas' alive mark"},
	{regexp.MustCompile(`^hb:(windows|health)$`), "replica → its blind windows"},
	{regexp.MustCompile(`^hb:parents:any$`), "the fleet has parents"},
	{regexp.MustCompile(`^hb:parents:verdicts$`), "a counter"},
	{regexp.MustCompile(`^hb:overrides:version$`), "a counter"},
	{regexp.MustCompile(`^hb:\{retyped\}$`), "the retyped log, capped at 10,000 entries"},
	{regexp.MustCompile(`^hb:\{retyped\}:count$`), "a counter"},
}

// strayKeys lists the keys of Redis that are no fleet-wide family's, and state hashes holding more than
// their guard field.
func strayKeys(t *testing.T, rdb redis.UniversalClient) []string {
	t.Helper()
	var stray []string
	for key, k := range testenv.Keyspace(t, rdb) {
		allowed := false
		for _, f := range fleetWideKeys {
			allowed = allowed || f.pattern.MatchString(key)
		}
		if !allowed {
			stray = append(stray, fmt.Sprintf("%q %s×%d", key, k.Type, k.Members))
			continue
		}
		if strings.HasSuffix(key, ":state") {
			// The guard field starts with a control character, which no device id may hold.
			for _, field := range rdb.HKeys(context.Background(), key).Val() {
				if field == "" || field[0] >= ' ' {
					stray = append(stray, fmt.Sprintf("%q field %q", key, field))
				}
			}
		}
	}
	sort.Strings(stray)
	return stray
}

// awaitOnlyFleetWide waits until Redis holds only fleet-wide keys (strayKeys), and fails listing the others
// if it does not within timeout.
func awaitOnlyFleetWide(t *testing.T, rdb redis.UniversalClient, timeout time.Duration) {
	t.Helper()
	var stray []string
	for end := time.Now().Add(timeout); ; time.Sleep(50 * time.Millisecond) {
		if stray = strayKeys(t, rdb); len(stray) == 0 || time.Now().After(end) {
			break
		}
	}
	require.Empty(t, stray, "Redis holds more than fleet-wide keys")
}

// TestEveryKeyFamilyEndsWithItsDevices: devices go through parents (one moving to another gateway),
// flapping, an acknowledgement, a reported failure and a registration with its own timeout; then every
// device is deleted but one, which retention forgets on the restarted daemon's first pass. Redis then
// holds only fleet-wide keys (fleetWideKeys).
func TestEveryKeyFamilyEndsWithItsDevices(t *testing.T) {
	g := startGrowthDaemon(t, `
types:
  default: {timeout: 1h, repeat_every: 1h}
  gateway: {timeout: 3s, repeat_every: 0s}
  sensor:  {timeout: 1s, repeat_every: 0s, flapping: {count: 2, window: 1h}}
detection: {grace_after_outage: 100ms, parent_wait: 1s, sweep_every: 200ms}
retention: {forget_after: 2s}
`)
	ctx := context.Background()
	sig := func(dev, typ, parent string) string {
		return fmt.Sprintf(`{"device_id":%q,"type":%q,"parent":%q}`, dev, typ, parent)
	}
	// The gateways stay alive until the devices are deleted, so their children alarm on their own.
	g.post(t, `{"device_id":"gw-a","type":"gateway"}`, `{"device_id":"gw-b","type":"gateway"}`)
	keepAlive, stopKeepAlive := context.WithCancel(ctx)
	defer stopKeepAlive()
	var alive sync.WaitGroup
	alive.Go(func() {
		body := `{"device_id":"gw-a","type":"gateway"}` + "\n" + `{"device_id":"gw-b","type":"gateway"}`
		for {
			select {
			case <-keepAlive.Done():
				return
			case <-time.After(300 * time.Millisecond):
			}
			req, err := newRequest("POST", g.base+"/v1/signals", "", strings.NewReader(body))
			if err == nil {
				if resp, err := http.DefaultClient.Do(req); err == nil {
					_ = resp.Body.Close()
				}
			}
		}
	})
	retiredAt := time.Now()
	g.post(t, sig("s1", "sensor", "gw-a"), sig("s2", "sensor", "gw-a"), sig("s3", "sensor", "gw-b"),
		sig("retired", "sensor", "gw-a"))
	g.post(t, sig("s1", "sensor", "gw-b")) // moves
	code, out := callJSON(t, g.base, "PUT", "/v1/devices/reg-1", "",
		`{"device_type":"sensor","timeout":"5m","parent":"gw-a","labels":{"site":"lab"}}`)
	require.Less(t, code, 300, "%v", out)

	// Flapping: s1 and s2 are interrupted twice, recovering in between.
	g.awaitEvents(t, map[string]int{"s1 interrupted": 1, "s2 interrupted": 1, "s3 interrupted": 1, "retired interrupted": 1})
	g.post(t, sig("s1", "sensor", "gw-b"), sig("s2", "sensor", "gw-a"))
	g.awaitEvents(t, map[string]int{"s1 recovered": 1, "s2 recovered": 1})
	g.awaitEvents(t, map[string]int{"s1 interrupted": 2, "s2 interrupted": 2, "s1 flapping": 1, "s2 flapping": 1})
	// An acknowledgement, and a reported failure with its reason.
	code, out = callJSON(t, g.base, "POST", "/v1/devices/s2/ack", "", "")
	require.Less(t, code, 300, "%v", out)
	g.post(t, sig("f1", "sensor", "gw-b"))
	g.post(t, `{"device_id":"f1","status":"fail","reason":"pressure sensor stuck"}`)
	g.awaitEvents(t, map[string]int{"f1 interrupted": 1, "s2 acked": 1})

	ks := testenv.Keyspace(t, g.rdb)
	for _, family := range []string{"hb:parents:{", "hb:children:{gw-a}", "hb:children:{gw-b}", "hb:parents:named:", "hb:registered:",
		"hb:overrides"} {
		require.NotEmpty(t, testenv.KeysLike(ks, family), "the drive wrote %s…", family)
	}
	var flaps, causes int
	for key := range ks {
		if strings.HasSuffix(key, ":flaps") {
			flaps++
		}
		if strings.HasSuffix(key, ":causes") {
			causes++
		}
	}
	require.Positive(t, flaps, "flap histories written")
	require.Positive(t, causes, "a cause written")
	require.NotContains(t, g.rdb.SMembers(ctx, "hb:children:{gw-a}").Val(), "s1", "s1 moved to gw-b")

	// Every device is deleted, but one: retention forgets it.
	stopKeepAlive()
	alive.Wait()
	for _, dev := range []string{"gw-a", "gw-b", "s1", "s2", "s3", "f1", "reg-1"} {
		code, out := callJSON(t, g.base, "DELETE", "/v1/devices/"+dev, "", "")
		require.Equal(t, http.StatusNoContent, code, "%s: %v", dev, out)
	}
	require.NotEmpty(t, strayKeys(t, g.rdb), "retired is still there, silent")

	// Retention runs on each replica's first sweep pass, then every 10 minutes: restart the daemon once
	// retired's incident (its deadline 1 s after its signal) is older than forget_after.
	if wait := time.Until(retiredAt.Add(3*time.Second + 200*time.Millisecond)); wait > 0 {
		time.Sleep(wait)
	}
	g.stop()
	g.start(t)
	awaitOnlyFleetWide(t, g.rdb, 20*time.Second)
	code, _ = callJSON(t, g.base, "GET", "/v1/devices/retired", "", "")
	require.Equal(t, http.StatusNotFound, code, "forgotten")
}
