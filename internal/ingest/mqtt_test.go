package ingest_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

func newMQTTSource(tb testing.TB, broker, id string, mod func(*ingest.MQTTOptions)) *ingest.MQTTSource {
	tb.Helper()
	opts := ingest.MQTTOptions{
		Brokers: []string{broker}, ClientID: id, QoS: 1, Subscriptions: mqttSubscriptions,
		MaxReconnectInterval: 500 * time.Millisecond, DrainTimeout: 500 * time.Millisecond,
	}
	if mod != nil {
		mod(&opts)
	}
	src, err := ingest.NewMQTTSource(opts)
	require.NoError(tb, err)
	return src
}

func TestMQTTTypeFromTopic(t *testing.T) {
	testenv.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		broker := testenv.StartMosquitto(t)
		p := startPipeline(t, policyStore(t, rdb), ingest.ChainOptions{})
		p.run(t, newMQTTSource(t, broker.Addr, "heartbeatd", nil))
		pub := mqttClient(t, broker.Addr, "publisher", nil)
		for topic, payload := range map[string]string{
			"fleet/gateway/gw-1/telemetry": `{"temp":21}`,
			"fleet/gateway/gw-2/telemetry": `{"type":"sensor"}`, // the payload's type wins
			"fleet/toaster/gw-3/telemetry": "",
			"gateways/ingest":              `{"type":"gateway"}`, // no {device_id} level, none in the payload
		} {
			tok := pub.Publish(topic, 1, false, payload)
			tok.Wait()
			require.NoError(t, tok.Error())
		}
		p.waitApplied(t, "gw-1", "gw-2", "gw-3")
		require.Equal(t, "gateway", p.device(t, "gw-1").Type)
		require.Equal(t, "sensor", p.device(t, "gw-2").Type)
		require.Equal(t, "default", p.device(t, "gw-3").Type, "an unknown name gets the default type")
		require.Eventually(t, func() bool { return len(p.dl.letters()) == 1 }, 10*time.Second, 5*time.Millisecond)
		require.Equal(t, ingest.ReasonNoDeviceID, p.dl.letters()[0].Reason)
	})
}

// An empty {device_id} level (devices//heartbeat) is bad input: dead-lettered as invalid_device_id with
// its topic and counted, whatever the payload's device_id says. Falling back to the payload would let any
// publisher allowed on that topic keep any device alive or report it failed.
func TestMQTTEmptyDeviceLevelIsBadInput(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	broker := testenv.StartMosquitto(t)
	p := startPipeline(t, policyStore(t, rdb), ingest.ChainOptions{})
	p.run(t, newMQTTSource(t, broker.Addr, "heartbeatd", nil))
	pub := mqttClient(t, broker.Addr, "publisher", nil)
	for _, m := range []struct{ topic, payload string }{
		{"devices//heartbeat", `{"device_id":"victim"}`},
		{"devices/before/heartbeat", ""},
		{"devices//heartbeat", `{"device_id":"victim","status":"fail","reason":"spoofed"}`},
		{"devices//heartbeat", ""},
		{"fleet/gateway//telemetry", `{"device_id":"victim"}`},
		{"devices/after/heartbeat", ""},
	} {
		tok := pub.Publish(m.topic, 1, false, m.payload)
		require.True(t, tok.WaitTimeout(10*time.Second))
		require.NoError(t, tok.Error())
	}
	p.waitApplied(t, "before", "after")
	require.Eventually(t, func() bool { return len(p.dl.letters()) == 4 }, 10*time.Second, 5*time.Millisecond)
	for _, d := range p.dl.letters() {
		require.Equal(t, ingest.ReasonInvalidDeviceID, d.Reason, "%s %q", d.Topic, d.Payload)
		require.Contains(t, []string{"devices//heartbeat", "fleet/gateway//telemetry"}, d.Topic)
	}
	require.Equal(t, 4.0, counter(t, p.reg, "heartbeatd_deadletters_total", map[string]string{"reason": ingest.ReasonInvalidDeviceID}))
	require.Equal(t, 4.0, counter(t, p.reg, "heartbeatd_signals_total", map[string]string{"source": ingest.SourceMQTT, "result": "deadletter"}))
	_, found, err := p.store.Device(t.Context(), "victim")
	require.NoError(t, err)
	require.False(t, found, "an empty topic level named the payload's device")
}

// TestMQTTInventedTypeNamesThenReload: a publisher inventing a type name per message on the default
// fleet/{device_type}/... subscription records none of them; the configured types keep their policies,
// and a name added by a reload takes effect from its device's next signal.
func TestMQTTInventedTypeNamesThenReload(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	broker := testenv.StartMosquitto(t)
	ctx := t.Context()
	store, err := deadline.New(rdb, deadline.Options{Slots: 16, Timeout: func(name string) time.Duration {
		if name == "invented-7" {
			return time.Hour
		}
		return timeoutOf(name)
	}})
	require.NoError(t, err)
	configured := []string{"default", "gateway"}
	require.NoError(t, store.Load(ctx, configured...))
	var known atomic.Pointer[[]string]
	known.Store(&configured)
	p := startPipeline(t, store, ingest.ChainOptions{KnownType: func(name string) bool { return slices.Contains(*known.Load(), name) }})
	p.run(t, newMQTTSource(t, broker.Addr, "heartbeatd", nil))
	pub := mqttClient(t, broker.Addr, "publisher", nil)
	publish := func(topic string) mqtt.Token { return pub.Publish(topic, 1, false, "") }

	const invented = 2000
	toks := []mqtt.Token{publish("fleet/gateway/gw/telemetry")}
	ids := []string{"gw"}
	for i := range invented {
		ids = append(ids, fmt.Sprint("dev-", i))
		toks = append(toks, publish(fmt.Sprintf("fleet/invented-%d/dev-%d/telemetry", i, i)))
	}
	for _, tok := range toks {
		require.True(t, tok.WaitTimeout(30*time.Second))
		require.NoError(t, tok.Error())
	}
	p.waitApplied(t, ids...)
	sent := time.Now()
	require.ElementsMatch(t, configured, recordedNames(t, rdb, store), "Redis records only configured names")
	require.Equal(t, "gateway", p.device(t, "gw").Type)
	require.WithinDuration(t, sent.Add(30*time.Second), p.device(t, "gw").Deadline, 10*time.Second)
	require.Equal(t, "default", p.device(t, "dev-7").Type)
	require.WithinDuration(t, sent.Add(time.Minute), p.device(t, "dev-7").Deadline, 10*time.Second)
	require.Equal(t, float64(invented), counter(t, p.reg, "heartbeatd_signals_unknown_type_total", nil))

	// The reload: Redis first, then the policies the chain reads, as the daemon does.
	reloaded := append(slices.Clone(configured), "invented-7")
	require.NoError(t, store.Load(ctx, reloaded...))
	known.Store(&reloaded)
	require.Equal(t, "default", p.device(t, "dev-7").Type, "nothing changes before the device signals again")
	tok := publish("fleet/invented-7/dev-7/telemetry")
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.Eventually(t, func() bool {
		p.rec.mu.Lock()
		defer p.rec.mu.Unlock()
		return p.rec.applied["dev-7"] == 2
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, "invented-7", p.device(t, "dev-7").Type)
	require.WithinDuration(t, time.Now().Add(time.Hour), p.device(t, "dev-7").Deadline, 10*time.Second)
	require.ElementsMatch(t, reloaded, recordedNames(t, rdb, store))
}

// recordedNames are the type names the registry holds, each once: a registry name is the type's name,
// then a unit separator and the timeout its scores are written with (internal/deadline).
func recordedNames(t *testing.T, rdb redis.UniversalClient, store *deadline.Store) []string {
	t.Helper()
	keys, err := rdb.HKeys(context.Background(), store.Keys().Types()).Result()
	require.NoError(t, err)
	var out []string
	for _, k := range keys {
		if name, _, _ := strings.Cut(k, "\x1f"); !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// TestMQTTSessionBacklogAfterRestart: messages left unacknowledged by a heartbeatd that stopped while
// Redis failed, and messages sent while no heartbeatd ran, all arrive at the next one with the same
// client id.
func TestMQTTSessionBacklogAfterRestart(t *testing.T) {
	testenv.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		broker := testenv.StartMosquitto(t)
		store := policyStore(t, rdb)
		ids := devices("backlog", 400)
		send := newMQTTTransportOn(t, broker.Addr)

		first := startPipeline(t, store, ingest.ChainOptions{})
		first.rec.failing.Store(true)
		src := newMQTTSource(t, broker.Addr, "heartbeatd", nil)
		first.run(t, src)
		send(t, rawFor(ids[:100], "")...)
		require.Eventually(t, func() bool { return first.rec.calls.Load() >= 2 }, 10*time.Second, 5*time.Millisecond)
		require.NoError(t, first.stop(src))
		first.stopChain() // the process ends: what it held was never acknowledged
		require.Zero(t, first.rec.count())

		send(t, rawFor(ids[100:], "")...) // while no heartbeatd runs

		second := startPipeline(t, store, ingest.ChainOptions{})
		second.run(t, newMQTTSource(t, broker.Addr, "heartbeatd", nil))
		second.waitApplied(t, ids...)
	})
}

// newMQTTTransportOn returns a send function publishing to broker.
func newMQTTTransportOn(tb testing.TB, broker string) func(tb testing.TB, msgs ...raw) {
	pub := mqttClient(tb, broker, "publisher", nil)
	return func(tb testing.TB, msgs ...raw) {
		tb.Helper()
		for _, m := range msgs {
			tok := pub.Publish(mqttTopic(m.device), 1, false, m.payload)
			require.True(tb, tok.WaitTimeout(10*time.Second))
			require.NoError(tb, tok.Error())
		}
	}
}

func TestMQTTSharedSubscriptionSplitsLoad(t *testing.T) {
	broker := testenv.StartMosquitto(t)
	store := policyStore(t, testenv.StartRedis(t).Client(t))
	shared := func(o *ingest.MQTTOptions) {
		o.Subscriptions = []ingest.Subscription{{Topic: "devices/{device_id}/heartbeat", SharedGroup: "heartbeatd"}}
	}
	a, b := startPipeline(t, store, ingest.ChainOptions{}), startPipeline(t, store, ingest.ChainOptions{})
	srcA := newMQTTSource(t, broker.Addr, "heartbeatd-a", shared)
	require.Equal(t, []string{"$share/heartbeatd/devices/+/heartbeat"}, srcA.Filters())
	a.run(t, srcA)
	b.run(t, newMQTTSource(t, broker.Addr, "heartbeatd-b", shared))

	ids := devices("shared", 400)
	newMQTTTransportOn(t, broker.Addr)(t, rawFor(ids, "")...)
	require.Eventually(t, func() bool {
		n := 0
		for _, id := range ids {
			if a.rec.has(id) || b.rec.has(id) {
				n++
			}
		}
		return n == len(ids)
	}, 30*time.Second, 5*time.Millisecond)
	require.Positive(t, a.rec.count(), "replica a got a share")
	require.Positive(t, b.rec.count(), "replica b got a share")
	require.Equal(t, len(ids), a.rec.count()+b.rec.count(), "each message went to one replica")
}

func TestMQTTRetainedMessagesAreNotSignals(t *testing.T) {
	broker := testenv.StartMosquitto(t)
	// Not "publisher", the client id of newMQTTTransportOn's client: two clients of one id take the
	// session from each other, and a write of the one taken over fails.
	pub := mqttClient(t, broker.Addr, "retainer", nil)
	// Not empty: an empty retained payload clears the topic's retained message instead of setting one.
	tok := pub.Publish(mqttTopic("long-gone"), 1, true, "{}")
	tok.Wait()
	require.NoError(t, tok.Error())

	p := startPipeline(t, policyStore(t, testenv.StartRedis(t).Client(t)), ingest.ChainOptions{})
	p.run(t, newMQTTSource(t, broker.Addr, "heartbeatd", nil))
	require.Eventually(t, func() bool {
		return counter(t, p.reg, "heartbeatd_signals_total", map[string]string{"result": "retained"}) == 1
	}, 10*time.Second, 5*time.Millisecond)
	newMQTTTransportOn(t, broker.Addr)(t, msg("alive", ""))
	p.waitApplied(t, "alive")
	require.False(t, p.rec.has("long-gone"))
}

func TestMQTTTLS(t *testing.T) {
	files := testenv.GenerateTLS(t)
	broker := testenv.StartMosquitto(t, testenv.MosquittoOptions{TLS: files, RequireClientCert: true})
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(files.CAPEM))
	clientCert, err := tls.LoadX509KeyPair(files.ClientCertFile, files.ClientKeyFile)
	require.NoError(t, err)
	good := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{clientCert}, MinVersion: tls.VersionTLS12}

	t.Run("mutual TLS", func(t *testing.T) {
		p := startPipeline(t, policyStore(t, testenv.StartRedis(t).Client(t)), ingest.ChainOptions{})
		p.run(t, newMQTTSource(t, broker.TLSAddr, "heartbeatd", func(o *ingest.MQTTOptions) { o.TLS = good }))
		pub := mqttClient(t, broker.TLSAddr, "publisher", good)
		tok := pub.Publish(mqttTopic("over-tls"), 1, false, "")
		tok.Wait()
		require.NoError(t, tok.Error())
		p.waitApplied(t, "over-tls")
	})
	for name, cfg := range map[string]*tls.Config{
		"untrusted server": {Certificates: []tls.Certificate{clientCert}, MinVersion: tls.VersionTLS12}, // system roots
		"no client cert":   {RootCAs: roots, MinVersion: tls.VersionTLS12},
	} {
		t.Run(name, func(t *testing.T) {
			p := startPipeline(t, policyStore(t, testenv.StartRedis(t).Client(t)), ingest.ChainOptions{})
			src := newMQTTSource(t, broker.TLSAddr, "heartbeatd-"+name, func(o *ingest.MQTTOptions) { o.TLS = cfg })
			err := src.Run(t.Context(), p.chain)
			require.Error(t, err, "a TLS failure is a configuration error, not retried")
			require.Contains(t, err.Error(), broker.TLSAddr, "the error names the broker")
			require.Contains(t, err.Error(), "tls", "the error says what failed")
		})
	}
}

// TestMQTTQoS0FloodWhileRedisIsPausedStaysBounded publishes a QoS 0 flood while Redis refuses writes
// (CLIENT PAUSE WRITE), so nothing the source takes in can be written. Nothing acknowledges QoS 0, so
// the broker keeps sending: the source queues up to MaxQueuedQoS0 and sheds the rest, and the process's
// memory stays bounded. QoS 1 signals sent once Redis writes again are all applied.
func TestMQTTQoS0FloodWhileRedisIsPausedStaysBounded(t *testing.T) {
	const flood, queued, batch, inFlight = 200_000, 1024, 64, 2
	rdb := testenv.StartRedis(t).Client(t)
	broker := testenv.StartMosquitto(t)
	p := startPipeline(t, policyStore(t, rdb), ingest.ChainOptions{Batch: batch, MaxInFlight: inFlight})
	p.run(t, newMQTTSource(t, broker.Addr, "heartbeatd", func(o *ingest.MQTTOptions) { o.MaxQueuedQoS0 = queued }))
	pub := mqttClient(t, broker.Addr, "publisher", nil)
	shed := func() float64 {
		return counter(t, p.reg, "heartbeatd_signals_total", map[string]string{"source": "mqtt", "result": "shed"})
	}

	runtime.GC()
	mem := startMemSampler(t)
	require.NoError(t, rdb.Do(t.Context(), "CLIENT", "PAUSE", 60_000, "WRITE").Err())
	unpaused := false
	unpause := func() {
		if !unpaused {
			unpaused = true
			require.NoError(t, rdb.Do(context.Background(), "CLIENT", "UNPAUSE").Err())
		}
	}
	t.Cleanup(unpause)

	start := time.Now()
	var last mqtt.Token
	for i := range flood {
		last = pub.Publish(fmt.Sprintf("devices/flood-%03d/heartbeat", i%1000), 0, false, "")
	}
	require.True(t, last.WaitTimeout(20*time.Second), "flood published")
	// What the source accepted is at most its QoS 0 queue, what the chain holds (its input, the batch it
	// fills, the batches in flight) and one message per worker; everything else must have been shed.
	held := queued + batch*(inFlight+2) + 4
	require.Eventually(t, func() bool { return shed() >= float64(flood-held) }, 20*time.Second, 5*time.Millisecond,
		"the flood is received and shed past the queue")
	peakHeap, hwm := mem.stop()
	t.Logf("QoS 0 flood of %d in %v with Redis paused: %.0f shed; peak heap+stacks growth %.1f MiB, peak RSS growth %.1f MiB",
		flood, time.Since(start).Round(time.Millisecond), shed(), float64(peakHeap)/(1<<20), float64(hwm)/(1<<20))
	require.Less(t, peakHeap, int64(200<<20), "heap and goroutine stacks stay bounded")
	if hwm >= 0 {
		require.Less(t, hwm, int64(200<<20), "resident memory stays bounded")
	}
	require.Zero(t, counter(t, p.reg, "heartbeatd_signals_total", map[string]string{"source": "mqtt", "result": "applied"}))

	unpause()
	ids := devices("after", 500)
	toks := make([]mqtt.Token, len(ids))
	for i, id := range ids {
		toks[i] = pub.Publish(mqttTopic(id), 1, false, "")
	}
	for _, tok := range toks {
		require.True(t, tok.WaitTimeout(20*time.Second))
		require.NoError(t, tok.Error())
	}
	p.waitApplied(t, ids...)
}

// memSampler records the peak growth of the Go heap and goroutine stacks, and of the resident set.
type memSampler struct {
	stopped  chan struct{}
	done     chan struct{}
	base     int64
	peak     atomic.Int64
	rssBase  int64
	rssReset bool
}

func startMemSampler(t *testing.T) *memSampler {
	t.Helper()
	s := &memSampler{stopped: make(chan struct{}), done: make(chan struct{})}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.base = int64(ms.HeapInuse + ms.StackInuse)
	// Writing 5 to clear_refs resets VmHWM to the current RSS (Linux ≥ 4.0), so VmHWM - VmRSS is this
	// test's peak growth.
	if os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil {
		s.rssBase, s.rssReset = procStatus(t, "VmRSS"), true
	}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if v := int64(ms.HeapInuse+ms.StackInuse) - s.base; v > s.peak.Load() {
				s.peak.Store(v)
			}
			select {
			case <-s.stopped:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-s.stopped:
		default:
			close(s.stopped)
		}
		<-s.done
	})
	return s
}

// stop returns the peak heap+stack growth and the peak RSS growth (-1 when /proc cannot tell).
func (s *memSampler) stop() (heap, rss int64) {
	close(s.stopped)
	<-s.done
	rss = -1
	if s.rssReset {
		if hwm, err := readProcStatus("VmHWM"); err == nil {
			rss = hwm - s.rssBase
		}
	}
	return s.peak.Load(), rss
}

func procStatus(t *testing.T, field string) int64 {
	t.Helper()
	v, err := readProcStatus(field)
	require.NoError(t, err)
	return v
}

// readProcStatus reads a "kB" field of /proc/self/status, in bytes.
func readProcStatus(field string) (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/self/status", field)
}
