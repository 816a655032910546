package ingest_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// TestMQTTProbeNoticesAFrozenBroker: a broker frozen with SIGSTOP keeps the connection open, so the
// source still reports itself connected; its probe stops coming back, and within ProbeLate + ProbeEvery
// the source is blind from the last probe back, which it reads up to. Once the broker resumes the
// probes come back and the blindness ends. No probe reaches the chain as a signal.
func TestMQTTProbeNoticesAFrozenBroker(t *testing.T) {
	broker := testenv.StartMosquitto(t)
	p := startPipeline(t, policyStore(t, testenv.StartRedis(t).Client(t)), ingest.ChainOptions{})
	src := newMQTTSource(t, broker.Addr, "heartbeatd", func(o *ingest.MQTTOptions) {
		o.ProbeTopic, o.ProbeEvery, o.ProbeLate = "heartbeatd/probe/heartbeatd", 100*time.Millisecond, 300*time.Millisecond
	})
	p.run(t, src)
	require.Eventually(t, func() bool { return time.Since(src.ReadUpTo()) < 300*time.Millisecond }, 10*time.Second, 5*time.Millisecond,
		"the probe comes back")
	require.Zero(t, src.Health().Blind)

	pid := broker.PID()
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	frozen := time.Now()
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	require.Eventually(t, func() bool { return !src.Health().Blind.IsZero() }, 10*time.Second, 5*time.Millisecond)
	h := src.Health()
	require.True(t, h.Connected, "paho has not noticed: the keep-alive is 30s")
	require.False(t, h.Blind.After(frozen), "blind from the last probe back, before the freeze")
	require.Contains(t, h.BlindWhy, "no probe came back")
	require.Equal(t, h.Blind, src.ReadUpTo())

	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	resumed := time.Now()
	require.Eventually(t, func() bool { return src.Health().Blind.IsZero() && src.ReadUpTo().After(resumed) }, 10*time.Second,
		5*time.Millisecond, "probes come back after the freeze")
	require.Zero(t, p.rec.count(), "no probe was taken for a signal")
	require.Empty(t, p.dl.letters())
}

// TestMQTTProbeWaitsBehindQueuedSignals: a probe vouches for what the broker delivered before it, so it
// queues behind the signals the broker holds back while its in-flight window to heartbeatd is full
// (Redis slow or down). A QoS 0 probe is not held by that window: it overtook them, and vouched for
// signals still at the broker.
func TestMQTTProbeWaitsBehindQueuedSignals(t *testing.T) {
	broker := testenv.StartMosquitto(t, testenv.MosquittoOptions{MaxInflight: 10})
	p := startPipeline(t, policyStore(t, testenv.StartRedis(t).Client(t)), ingest.ChainOptions{Batch: 4, MaxInFlight: 1})
	src := newMQTTSource(t, broker.Addr, "heartbeatd", func(o *ingest.MQTTOptions) {
		o.ProbeTopic, o.ProbeEvery, o.ProbeLate = "heartbeatd/probe/heartbeatd", 100*time.Millisecond, 300*time.Millisecond
	})
	p.run(t, src)
	require.Eventually(t, func() bool { return time.Since(src.ReadUpTo()) < 300*time.Millisecond }, 10*time.Second, 5*time.Millisecond,
		"the probe comes back")

	p.rec.slow.Store(int64(100 * time.Millisecond)) // 4 signals written every 100 ms: the window stays full
	ids := devices("queued", 200)
	newMQTTTransportOn(t, broker.Addr)(t, rawFor(ids, "")...)
	sent := time.Now()
	require.Eventually(t, func() bool { return src.ReadUpTo().After(sent) }, 30*time.Second, 5*time.Millisecond,
		"a probe sent after the signals comes back")
	require.EqualValues(t, len(ids), ingest.MQTTArrived(src), "the probe came back only after every signal sent before it")

	p.rec.slow.Store(0)
	p.waitApplied(t, ids...)
}

// TestMQTTProbeRefusedByTheBrokerCostsNothing: a broker whose ACL refuses the probe topic (its SUBSCRIBE
// fails, its PUBLISH is dropped) leaves the source connected, neither blind nor bounded: signals flow as
// without a probe.
func TestMQTTProbeRefusedByTheBrokerCostsNothing(t *testing.T) {
	broker := testenv.StartMosquitto(t, testenv.MosquittoOptions{ACL: "topic readwrite devices/#\ntopic readwrite fleet/#\ntopic readwrite gateways/#"})
	p := startPipeline(t, policyStore(t, testenv.StartRedis(t).Client(t)), ingest.ChainOptions{})
	src := newMQTTSource(t, broker.Addr, "heartbeatd", func(o *ingest.MQTTOptions) {
		o.ProbeTopic, o.ProbeEvery, o.ProbeLate = "heartbeatd/probe/heartbeatd", 100*time.Millisecond, 300*time.Millisecond
	})
	p.run(t, src)
	newMQTTTransportOn(t, broker.Addr)(t, rawFor([]string{"d1"}, "")...)
	p.waitApplied(t, "d1")
	require.Never(t, func() bool { return !src.Health().Blind.IsZero() || !src.ReadUpTo().IsZero() }, time.Second, 10*time.Millisecond)
	require.True(t, src.Health().Connected)
}
