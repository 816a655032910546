package ingest_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// forEachTransport runs one test body over every source: the same contract holds for MQTT and Kafka.
func forEachTransport(t *testing.T, body func(t *testing.T, tr *transport)) {
	t.Run("mqtt", func(t *testing.T) { body(t, newMQTTTransport(t, testenv.MosquittoOptions{Persistence: true})) })
	t.Run("kafka", func(t *testing.T) {
		tr, _ := newKafkaTransport(t, 2)
		body(t, tr)
	})
}

// forEachBackendAndTransport runs body over every Redis deployment and every source, each combination on
// an empty Redis and a broker of its own (TestX/cluster/kafka).
func forEachBackendAndTransport(t *testing.T, body func(t *testing.T, rdb redis.UniversalClient, tr *transport)) {
	for _, b := range testenv.RedisBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			forEachTransport(t, func(t *testing.T, tr *transport) { body(t, b.Client(t), tr) })
		})
	}
}

func TestSourcesApplySignals(t *testing.T) {
	forEachBackendAndTransport(t, func(t *testing.T, rdb redis.UniversalClient, tr *transport) {
		p := startPipeline(t, policyStore(t, rdb), ingest.ChainOptions{})
		p.run(t, tr.source(t, "a"))

		base := time.Now().Add(-10 * time.Second).Truncate(time.Second) // old, but not late for any type
		ms := func(d time.Duration) int64 { return base.Add(d).UnixMilli() }
		before := time.Now().Truncate(time.Millisecond)
		tr.send(t,
			msg("plain", ""),
			msg("opaque", "\x00\xffnot json"),
			msg("", `{"device_id":"from-payload","type":"gateway"}`),
			msg("key-or-topic", `{"device_id":"key-or-topic"}`), // the same id in both: fine
			msg("typed", `{"type":"sensor"}`),
			msg("unknown-type", `{"type":"toaster"}`),
			msg("ts-seconds", fmt.Sprintf(`{"ts":%d}`, base.Unix())),
			msg("ts-millis", fmt.Sprintf(`{"ts":%d}`, ms(1500*time.Millisecond))),
			msg("ts-rfc3339", fmt.Sprintf(`{"ts":%q,"type":"gateway"}`, base.Add(2*time.Second).Format(time.RFC3339Nano))),
			msg("future", fmt.Sprintf(`{"ts":%d}`, time.Now().Add(time.Hour).UnixMilli())),
			msg("out-of-order", fmt.Sprintf(`{"ts":%d}`, ms(10*time.Second))),
		)
		p.waitApplied(t, "plain", "opaque", "from-payload", "key-or-topic", "typed", "unknown-type", "ts-seconds",
			"ts-millis", "ts-rfc3339", "future", "out-of-order")
		// The older signal comes second and must not move the deadline back; a replay changes nothing.
		tr.send(t, msg("out-of-order", fmt.Sprintf(`{"ts":%d}`, ms(0))), msg("out-of-order", fmt.Sprintf(`{"ts":%d}`, ms(10*time.Second))))
		require.Eventually(t, func() bool {
			p.rec.mu.Lock()
			defer p.rec.mu.Unlock()
			return p.rec.applied["out-of-order"] == 3
		}, 10*time.Second, 5*time.Millisecond)
		after := time.Now()

		exact := map[string]time.Time{
			"ts-seconds":   base.Add(time.Minute),
			"ts-millis":    base.Add(1500*time.Millisecond + time.Minute),
			"ts-rfc3339":   base.Add(2*time.Second + 30*time.Second),
			"out-of-order": base.Add(10*time.Second + time.Minute),
		}
		for id, want := range exact {
			require.Equal(t, want.UnixMilli(), p.device(t, id).Deadline.UnixMilli(), id)
		}
		// Signals without ts (and the clamped future one) count from their receive time.
		for id, timeout := range map[string]time.Duration{
			"plain": time.Minute, "opaque": time.Minute, "from-payload": 30 * time.Second, "key-or-topic": time.Minute,
			"typed": 10 * time.Minute, "unknown-type": time.Minute, "future": time.Minute,
		} {
			dl := p.device(t, id).Deadline
			require.False(t, dl.Before(before.Add(timeout)), "%s: deadline %v before %v", id, dl, before.Add(timeout))
			require.False(t, dl.After(after.Add(timeout)), "%s: deadline %v after %v", id, dl, after.Add(timeout))
		}
		types := map[string]string{}
		for _, id := range []string{"plain", "from-payload", "typed", "unknown-type", "ts-rfc3339"} {
			types[id] = p.device(t, id).Type
		}
		require.Equal(t, map[string]string{"plain": "default", "from-payload": "gateway", "typed": "sensor",
			"unknown-type": "default", "ts-rfc3339": "gateway"}, types)
		require.Equal(t, 1.0, counter(t, p.reg, "heartbeatd_signals_clamped_total", map[string]string{"source": tr.name}))
		require.Equal(t, 1.0, counter(t, p.reg, "heartbeatd_signals_unknown_type_total", nil))
		require.Equal(t, 13.0, counter(t, p.reg, "heartbeatd_signals_total", map[string]string{"source": tr.name, "result": "applied"}))
		require.Equal(t, 1.0, counter(t, p.reg, "heartbeatd_ingest_connected", map[string]string{"source": tr.name}))
	})
}

func TestSourcesDeadLetterBadInputBesideValidInput(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr *transport) {
		p := startPipeline(t, policyStore(t, testenv.StartRedis(t).Client(t)), ingest.ChainOptions{})
		p.run(t, tr.source(t, "a"))

		oversize := `{"device_id":"x","pad":"` + strings.Repeat("x", ingest.MaxPayload) + `"}`
		bad := []struct {
			raw    raw
			reason string
		}{
			{msg("", `{"type":"gateway"}`), ingest.ReasonNoDeviceID},
			{msg("", ""), ingest.ReasonNoDeviceID},
			{msg(strings.Repeat("d", ingest.MaxIDLen+1), ""), ingest.ReasonInvalidDeviceID},
			{msg("", `{"device_id":"bell\u0007"}`), ingest.ReasonInvalidDeviceID},
			{msg("", `{"device_id":17}`), ingest.ReasonInvalidDeviceID},
			{msg("dev", `{"device_id":"dev",`), ingest.ReasonMalformedJSON},
			{msg("dev", `{"ts":"last tuesday"}`), ingest.ReasonBadTS},
			{msg("dev", `{"ts":-5}`), ingest.ReasonBadTS},
			{msg("dev", `{"type":["gateway"]}`), ingest.ReasonInvalidType},
			{msg("dev", oversize), ingest.ReasonOversize},
			// The topic or key names "dev": a payload speaking for another device is refused.
			{msg("dev", `{"device_id":"victim"}`), ingest.ReasonIDMismatch},
		}
		var stream []raw
		var valid, wantReasons []string
		for i, b := range bad {
			id := fmt.Sprintf("valid-%02d", i)
			valid = append(valid, id)
			stream = append(stream, msg(id, ""), b.raw)
			wantReasons = append(wantReasons, b.reason)
		}
		stream = append(stream, msg("valid-last", `{"type":"gateway"}`))
		valid = append(valid, "valid-last")
		tr.send(t, stream...)

		p.waitApplied(t, valid...)
		require.Eventually(t, func() bool { return len(p.dl.letters()) == len(bad) }, 10*time.Second, 5*time.Millisecond)
		var gotReasons []string
		for _, d := range p.dl.letters() {
			gotReasons = append(gotReasons, d.Reason)
			require.Equal(t, tr.name, d.Source)
			if d.Reason == ingest.ReasonMalformedJSON {
				require.Equal(t, `{"device_id":"dev",`, string(d.Payload), "the original bytes")
				require.Equal(t, tr.topic("dev"), d.Topic)
			}
		}
		sort.Strings(gotReasons)
		sort.Strings(wantReasons)
		require.Equal(t, wantReasons, gotReasons)
		_, found, err := p.store.Device(t.Context(), "dev")
		require.NoError(t, err)
		require.False(t, found, "no bad message wrote a deadline")
		_, found, err = p.store.Device(t.Context(), "victim")
		require.NoError(t, err)
		require.False(t, found, "a publisher cannot keep another device alive")
		for r, n := range map[string]float64{ingest.ReasonNoDeviceID: 2, ingest.ReasonInvalidDeviceID: 3, ingest.ReasonBadTS: 2, ingest.ReasonOversize: 1,
			ingest.ReasonIDMismatch: 1} {
			require.Equal(t, n, counter(t, p.reg, "heartbeatd_deadletters_total", map[string]string{"reason": r}), r)
		}
		require.Equal(t, float64(len(bad)), counter(t, p.reg, "heartbeatd_signals_total", map[string]string{"source": tr.name, "result": "deadletter"}))
	})
}

// TestSourcesSurviveRedisOutage kills redis-server mid-stream: nothing is acknowledged while it is down,
// and once it is back every signal sent is in Redis.
func TestSourcesSurviveRedisOutage(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr *transport) {
		srv := testenv.StartRedis(t, testenv.RedisOptions{AOF: true})
		p := startPipeline(t, policyStore(t, srv.Client(t)), ingest.ChainOptions{Batch: 64})
		src := tr.source(t, "a")
		p.run(t, src)

		ids := devices("outage", 1500)
		tr.send(t, rawFor(ids[:500], `{"type":"gateway"}`)...)
		p.waitApplied(t, ids[:500]...)

		srv.Kill(t)
		tr.send(t, rawFor(ids[500:1000], "")...)
		require.Eventually(t, func() bool {
			return counter(t, p.reg, "heartbeatd_refresh_errors_total", nil) >= 3 && src.Health().Lag > 0
		}, 20*time.Second, 5*time.Millisecond, "the outage shows as refresh errors and a growing lag")
		applied := p.rec.count()

		srv.Start(t)
		tr.send(t, rawFor(ids[1000:], "")...)
		p.waitApplied(t, ids...)
		require.GreaterOrEqual(t, applied, 500)
		counts, err := p.store.Count(t.Context())
		require.NoError(t, err)
		require.EqualValues(t, len(ids), counts.Online, "every signal sent is in Redis")
		require.Equal(t, "gateway", p.device(t, ids[0]).Type, "written before the outage, kept across the restart")
		require.Eventually(t, func() bool { return src.Health().Lag == 0 }, 10*time.Second, 5*time.Millisecond)
	})
}

// TestLagIsTheOldestWaitingSignal: a backlog that drains steadily but slowly (Redis answering slowly,
// as after an outage) shows as the age of its oldest signal not yet written, which the hold-back
// compares with ingest.max_lag. The time since the last write stays short meanwhile, and judged by it
// a deadline could be claimed while the device's newer signal still waited in the backlog.
func TestLagIsTheOldestWaitingSignal(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr *transport) {
		srv := testenv.StartRedis(t, testenv.RedisOptions{})
		p := startPipeline(t, policyStore(t, srv.Client(t)), ingest.ChainOptions{Batch: 4, MaxInFlight: 1})
		src := tr.source(t, "a")
		p.run(t, src)

		p.rec.slow.Store(int64(100 * time.Millisecond)) // 4 signals written every 100 ms: 200 take 5 s
		ids := devices("drain", 200)
		tr.send(t, rawFor(ids, "")...)
		require.Eventually(t, func() bool { return src.Health().Lag >= 1500*time.Millisecond }, 20*time.Second, 10*time.Millisecond,
			"the backlog's oldest signal ages while the backlog drains")
		require.Less(t, p.rec.count(), len(ids), "shown while the backlog drains, not after")
		require.Greater(t, p.rec.count(), 0, "the backlog drains meanwhile: a write every 100 ms")

		p.rec.slow.Store(0)
		p.waitApplied(t, ids...)
		require.Eventually(t, func() bool { return src.Health().Lag == 0 }, 10*time.Second, 5*time.Millisecond)
	})
}

// TestSourcesReconnectAfterBrokerRestart restarts the broker under a running source.
func TestSourcesReconnectAfterBrokerRestart(t *testing.T) {
	forEachBackendAndTransport(t, func(t *testing.T, rdb redis.UniversalClient, tr *transport) {
		p := startPipeline(t, policyStore(t, rdb), ingest.ChainOptions{})
		src := tr.source(t, "a")
		p.run(t, src)
		ids := devices("restart", 400)
		tr.send(t, rawFor(ids[:200], "")...)
		p.waitApplied(t, ids[:200]...)

		tr.stop(t)
		require.Eventually(t, func() bool { return !src.Health().Connected }, 20*time.Second, 5*time.Millisecond, "disconnect noticed")
		require.Equal(t, 0.0, counter(t, p.reg, "heartbeatd_ingest_connected", map[string]string{"source": tr.name}))
		down := src.Health().Since
		tr.start(t)
		require.Eventually(t, func() bool { return src.Health().Connected }, 30*time.Second, 5*time.Millisecond, "reconnected")
		require.True(t, src.Health().Since.After(down))

		tr.send(t, rawFor(ids[200:], "")...)
		p.waitApplied(t, ids...)
	})
}
