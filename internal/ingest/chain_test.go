package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// fakeRefresher records every refresh; fail makes it fail, hold makes it wait for a release.
type fakeRefresher struct {
	mu      sync.Mutex
	batches [][]deadline.Signal
	fail    atomic.Bool
	// failDevice, when set, fails every batch holding that device.
	failDevice atomic.Value
	calls      atomic.Int64
	hold       chan chan struct{} // when set, each call sends a release channel and waits for it to close
	// slowDevice, when set, makes every batch holding that device wait until slowRelease is closed.
	slowDevice  atomic.Value
	slowRelease chan struct{}
}

func (f *fakeRefresher) Refresh(ctx context.Context, sigs []deadline.Signal) error {
	f.calls.Add(1)
	if f.hold != nil {
		release := make(chan struct{})
		select {
		case f.hold <- release:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if holds(sigs, &f.slowDevice) {
		select {
		case <-f.slowRelease:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if f.fail.Load() {
		return errors.New("redis: connection refused")
	}
	if holds(sigs, &f.failDevice) {
		return errors.New("redis: connection refused")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches = append(f.batches, append([]deadline.Signal(nil), sigs...))
	return nil
}

// holds reports whether sigs hold the device named in device (a string; unset or "": none).
func holds(sigs []deadline.Signal, device *atomic.Value) bool {
	d, _ := device.Load().(string)
	return d != "" && slices.ContainsFunc(sigs, func(s deadline.Signal) bool { return s.Device == d })
}

func (f *fakeRefresher) signals() []deadline.Signal {
	f.mu.Lock()
	defer f.mu.Unlock()
	var all []deadline.Signal
	for _, b := range f.batches {
		all = append(all, b...)
	}
	return all
}

// fakeDeadLetters records dead letters; failing makes every publish fail.
type fakeDeadLetters struct {
	mu      sync.Mutex
	got     []event.DeadLetter
	failing atomic.Bool
}

func (f *fakeDeadLetters) PublishDeadLetter(_ context.Context, d event.DeadLetter) error {
	if f.failing.Load() {
		return errors.New("kafka: leader not available")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, d)
	return nil
}

func (f *fakeDeadLetters) letters() []event.DeadLetter {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]event.DeadLetter(nil), f.got...)
}

// acks counts acknowledgements per message id and remembers their order.
type acks struct {
	mu    sync.Mutex
	order []int
	count map[int]int
}

func newAcks() *acks { return &acks{count: map[int]int{}} }

func (a *acks) fn(id int) func() {
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.order = append(a.order, id)
		a.count[id]++
	}
}

func (a *acks) n() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.order)
}

func (a *acks) snapshot() ([]int, map[int]int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := make(map[int]int, len(a.count))
	for k, v := range a.count {
		c[k] = v
	}
	return append([]int(nil), a.order...), c
}

type chainFixture struct {
	chain *ingest.Chain
	reg   *prometheus.Registry
	ref   *fakeRefresher
	dl    *fakeDeadLetters
	acks  *acks
	ctx   context.Context
}

func startChain(t *testing.T, ref *fakeRefresher, opts ingest.ChainOptions) *chainFixture {
	t.Helper()
	f := &chainFixture{ref: ref, dl: &fakeDeadLetters{}, acks: newAcks(), reg: prometheus.NewRegistry()}
	opts.Registerer = f.reg
	c, err := ingest.NewChain(ref, f.dl, opts)
	require.NoError(t, err)
	f.chain = c
	ctx, cancel := context.WithCancel(context.Background())
	f.ctx = ctx
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

func (f *chainFixture) submit(t *testing.T, id int, m ingest.Message) {
	t.Helper()
	if m.Source == "" {
		m.Source = ingest.SourceKafka
	}
	m.Ack = f.acks.fn(id)
	require.NoError(t, f.chain.Submit(f.ctx, m))
}

func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func TestChainAcknowledgesOnlyAfterRefresh(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	ref := &fakeRefresher{}
	ref.fail.Store(true)
	f := startChain(t, ref, ingest.ChainOptions{})
	for i := range 10 {
		f.submit(t, i, ingest.Message{Key: []byte(fmt.Sprintf("dev-%d", i))})
	}
	require.Eventually(t, func() bool { return ref.calls.Load() >= 3 }, 5*time.Second, time.Millisecond, "refresh is retried")
	require.Zero(t, f.acks.n(), "nothing is acknowledged while Redis fails")

	ref.fail.Store(false)
	require.Eventually(t, func() bool { return f.acks.n() == 10 }, 5*time.Second, time.Millisecond)
	_, count := f.acks.snapshot()
	for i := range 10 {
		require.Equal(t, 1, count[i], "message %d acknowledged once", i)
	}
	require.Len(t, ref.signals(), 10)
	require.Equal(t, 10.0, counter(t, f.reg, "heartbeatd_signals_total", map[string]string{"source": "kafka", "result": "applied"}))
	require.GreaterOrEqual(t, counter(t, f.reg, "heartbeatd_refresh_errors_total", nil), 2.0)
}

func TestChainBackpressureBoundsWhatItHolds(t *testing.T) {
	ref := &fakeRefresher{}
	ref.fail.Store(true)
	const batch, inFlight = 8, 2
	f := startChain(t, ref, ingest.ChainOptions{Batch: batch, MaxInFlight: inFlight})
	accepted := 0
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(f.ctx, 100*time.Millisecond)
		err := f.chain.Submit(ctx, ingest.Message{Source: ingest.SourceMQTT, Device: fmt.Sprintf("d%d", i), Ack: f.acks.fn(i)})
		cancel()
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded)
			break
		}
		accepted++
		// Bound: the input queue (batch), the batch being filled (batch), the batches in flight.
		require.LessOrEqual(t, accepted, batch*(inFlight+2), "Submit must block once the chain is full")
	}
	require.Zero(t, f.acks.n())
	ref.fail.Store(false)
	require.Eventually(t, func() bool { return f.acks.n() == accepted }, 5*time.Second, time.Millisecond)
}

func TestChainAcknowledgesBatchesInOrder(t *testing.T) {
	ref := &fakeRefresher{hold: make(chan chan struct{})}
	f := startChain(t, ref, ingest.ChainOptions{Batch: 2, MaxInFlight: 3})
	// First batch alone (nothing in flight: it goes at once).
	f.submit(t, 0, ingest.Message{Device: "a"})
	first := <-ref.hold
	// Two more batches while the first is in flight.
	for i := 1; i <= 4; i++ {
		f.submit(t, i, ingest.Message{Device: fmt.Sprintf("d%d", i)})
	}
	second, third := <-ref.hold, <-ref.hold
	close(third)
	close(second)
	require.Eventually(t, func() bool { return ref.calls.Load() == 3 && len(ref.signals()) == 4 }, 5*time.Second, time.Millisecond)
	require.Zero(t, f.acks.n(), "later batches wait for the first")
	close(first)
	require.Eventually(t, func() bool { return f.acks.n() == 5 }, 5*time.Second, time.Millisecond)
	order, _ := f.acks.snapshot()
	require.Equal(t, []int{0, 1, 2, 3, 4}, order)
}

func TestChainClampsFutureTimestamps(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	ref := &fakeRefresher{}
	f := startChain(t, ref, ingest.ChainOptions{MaxClockSkew: 5 * time.Second, Now: func() time.Time { return now }})
	ms := func(t time.Time) string { return fmt.Sprint(t.UnixMilli()) }
	f.submit(t, 0, ingest.Message{Device: "skewed-ok", Payload: []byte(`{"ts":` + ms(now.Add(4*time.Second)) + `}`)})
	f.submit(t, 1, ingest.Message{Device: "future", Payload: []byte(`{"ts":` + ms(now.Add(time.Hour)) + `}`)})
	f.submit(t, 2, ingest.Message{Device: "past", Payload: []byte(`{"ts":` + ms(now.Add(-time.Hour)) + `}`)})
	f.submit(t, 3, ingest.Message{Device: "none"})
	require.Eventually(t, func() bool { return f.acks.n() == 4 }, 5*time.Second, time.Millisecond)
	got := map[string]time.Duration{}
	for _, s := range ref.signals() {
		got[s.Device] = s.Seen.Sub(now)
	}
	require.Equal(t, map[string]time.Duration{"skewed-ok": 4 * time.Second, "future": 0, "past": -time.Hour, "none": 0}, got)
	require.Equal(t, 1.0, counter(t, f.reg, "heartbeatd_signals_clamped_total", map[string]string{"source": "kafka"}))
}

func TestChainCoalesces(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	ref := &fakeRefresher{}
	f := startChain(t, ref, ingest.ChainOptions{Coalesce: time.Minute, Now: func() time.Time { return t0 }})
	at := func(d time.Duration) ingest.Message {
		return ingest.Message{Device: "d", Received: t0.Add(d)}
	}
	f.submit(t, 0, at(0))               // written
	f.submit(t, 1, at(30*time.Second))  // coalesced
	f.submit(t, 2, at(-10*time.Second)) // out of order: coalesced
	m := at(40 * time.Second)           // type changes: written
	m.Type = "gateway"
	f.submit(t, 3, m)
	f.submit(t, 4, at(50*time.Second))  // untyped keeps gateway: coalesced
	f.submit(t, 5, at(100*time.Second)) // a window past the last write: written
	f.submit(t, 6, ingest.Message{Device: "other", Received: t0})
	require.Eventually(t, func() bool { return f.acks.n() == 7 }, 5*time.Second, time.Millisecond)
	var got []string
	for _, s := range ref.signals() {
		got = append(got, fmt.Sprintf("%s@%v/%s", s.Device, s.Seen.Sub(t0), s.Type))
	}
	require.ElementsMatch(t, []string{"d@0s/", "d@40s/gateway", "d@1m40s/", "other@0s/"}, got)
	require.Equal(t, 3.0, counter(t, f.reg, "heartbeatd_signals_total", map[string]string{"result": "coalesced"}))
	require.Equal(t, 4.0, counter(t, f.reg, "heartbeatd_signals_total", map[string]string{"result": "applied"}))
}

// TestChainWritesAParentChange: a signal naming another parent than the last write is written, however
// soon after it: coalescing it would keep the device under its former parent (docs/concepts.md,
// "Gateways (parents)") until its next write.
func TestChainWritesAParentChange(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	ref := &fakeRefresher{}
	f := startChain(t, ref, ingest.ChainOptions{Coalesce: time.Minute, Now: func() time.Time { return t0 }})
	at := func(d time.Duration, parent string) ingest.Message {
		return ingest.Message{Device: "d", Parent: parent, Received: t0.Add(d)}
	}
	f.submit(t, 0, at(0, "gw-a"))              // written
	f.submit(t, 1, at(10*time.Second, "gw-a")) // same parent: coalesced
	f.submit(t, 2, at(20*time.Second, ""))     // names none (the link stays): coalesced
	f.submit(t, 3, at(30*time.Second, "gw-b")) // moves: written
	f.submit(t, 4, at(40*time.Second, ""))     // coalesced
	f.submit(t, 5, at(50*time.Second, "gw-b")) // coalesced
	require.Eventually(t, func() bool { return f.acks.n() == 6 }, 5*time.Second, time.Millisecond)
	var got []string
	for _, s := range ref.signals() {
		got = append(got, fmt.Sprintf("%s@%v/%s", s.Device, s.Seen.Sub(t0), s.Parent))
	}
	require.Equal(t, []string{"d@0s/gw-a", "d@30s/gw-b"}, got)
}

// A reported failure or an offline message resets what the coalescer remembers of its device: the next
// signal, however soon, is the recovery (or the reconnection) and is written, not skipped as a duplicate
// of the signal before the failure.
func TestChainMarkResetsCoalescer(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	ref := &fakeRefresher{}
	f := startChain(t, ref, ingest.ChainOptions{Coalesce: time.Minute, Now: func() time.Time { return t0 }})
	at := func(dev string, d time.Duration, payload string) ingest.Message {
		return ingest.Message{Device: dev, Received: t0.Add(d), Payload: []byte(payload)}
	}
	f.submit(t, 0, at("pump", 0, ""))                                            // written
	f.submit(t, 1, at("pump", 10*time.Second, `{"status":"fail","reason":"x"}`)) // the failure
	f.submit(t, 2, at("pump", 20*time.Second, ""))                               // the recovery: written
	f.submit(t, 3, at("pump", 30*time.Second, ""))                               // coalesced with the recovery
	f.submit(t, 4, at("radio", 0, ""))                                           // written
	off := at("radio", 10*time.Second, "offline")
	off.Source, off.Presence = ingest.SourceMQTT, config.PresenceOffline
	f.submit(t, 5, off)
	f.submit(t, 6, at("radio", 15*time.Second, "")) // back online: written
	require.Eventually(t, func() bool { return f.acks.n() == 7 }, 5*time.Second, time.Millisecond)
	var got []string
	for _, s := range ref.signals() {
		got = append(got, fmt.Sprintf("%s@%v", s.Device, s.Seen.Sub(t0)))
	}
	require.ElementsMatch(t, []string{"pump@0s", "pump@20s", "radio@0s", "radio@15s"}, got)
	require.Equal(t, 1.0, counter(t, f.reg, "heartbeatd_signals_total", map[string]string{"result": "coalesced"}))
}

// The same through a real store: the device that reported a failure and signalled again within the
// coalescing window has its deadline timed from the recovery, and no failure left to claim.
func TestCoalescedRecoveryAfterFailureIsWritten(t *testing.T) {
	store := policyStore(t, testenv.StartRedis(t).Client(t))
	p := startPipeline(t, store, ingest.ChainOptions{Coalesce: 30 * time.Second})
	now := time.Now().Truncate(time.Millisecond)
	submit := func(d time.Duration, payload string) {
		t.Helper()
		acked := make(chan struct{})
		require.NoError(t, p.chain.Submit(t.Context(), ingest.Message{Source: ingest.SourceKafka, Key: []byte("pump"),
			Payload: []byte(payload), Received: now.Add(d), Ack: func() { close(acked) }}))
		select {
		case <-acked:
		case <-time.After(10 * time.Second):
			t.Fatal("not acknowledged")
		}
	}
	submit(-3*time.Second, "")
	submit(-2*time.Second, `{"status":"fail","reason":"probe broken"}`)
	require.Equal(t, now.Add(-2*time.Second), p.device(t, "pump").Deadline, "the failure moved the deadline")
	submit(-time.Second, "")
	require.Equal(t, now.Add(-time.Second+timeoutOf("default")), p.device(t, "pump").Deadline, "the recovery was written")
	res, err := store.Claim(t.Context(), testenv.AllSlots(store.Slots()), deadline.ClaimOptions{Now: time.Now(), Lease: time.Minute, Batch: 10})
	require.NoError(t, err)
	require.Empty(t, res.Claims, "the recovered device is claimed for its failure")
}

func TestChainUnknownTypesGetTheDefaultType(t *testing.T) {
	ref := &fakeRefresher{}
	f := startChain(t, ref, ingest.ChainOptions{KnownType: func(s string) bool { return s == "gateway" }})
	f.submit(t, 0, ingest.Message{Device: "a", Type: "gateway"})
	f.submit(t, 1, ingest.Message{Device: "b", Type: "toaster"})
	f.submit(t, 2, ingest.Message{Device: "c", Type: "toaster"})
	f.submit(t, 3, ingest.Message{Device: "d"})
	require.Eventually(t, func() bool { return f.acks.n() == 4 }, 5*time.Second, time.Millisecond)
	types := map[string]string{}
	for _, s := range ref.signals() {
		types[s.Device] = s.Type
	}
	require.Equal(t, map[string]string{"a": "gateway", "b": "default", "c": "default", "d": ""}, types,
		"an unknown name is written as the default type; an untyped signal keeps the recorded one")
	require.Equal(t, 2.0, counter(t, f.reg, "heartbeatd_signals_unknown_type_total", nil))
	require.Equal(t, 4.0, counter(t, f.reg, "heartbeatd_signals_total", map[string]string{"result": "applied"}))
}

// TestChainLogsUnknownTypesWithBoundedMemory floods the chain with invented type names: each of the first
// names is logged once, the set of logged names stops growing at its limit, and the rest are summarised
// once per window.
func TestChainLogsUnknownTypesWithBoundedMemory(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	var now atomic.Int64 // Unix ms; Submit reads the clock on the test's goroutine
	now.Store(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC).UnixMilli())
	ref := &nopRefresher{}
	reg := prometheus.NewRegistry()
	c, err := ingest.NewChain(ref, nil, ingest.ChainOptions{KnownType: func(s string) bool { return s == "gateway" },
		Now: func() time.Time { return time.UnixMilli(now.Load()) }, Logger: zap.New(core), Registerer: reg})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	const names = 5000
	submit := func(i int, typ string) {
		require.NoError(t, c.Submit(ctx, ingest.Message{Source: ingest.SourceMQTT, Device: fmt.Sprint("d-", i), Type: typ}))
	}
	for i := range names {
		submit(i, fmt.Sprint("invented-", i))
		submit(i, fmt.Sprint("invented-", i)) // the same name again: never logged twice
	}
	perName := logs.FilterMessage("unknown device type; the default policy applies")
	require.Equal(t, ingest.MaxLoggedTypes, perName.Len(), "one line per name, up to the limit")
	require.Equal(t, 1, logs.FilterMessageSnippet("reached the limit").Len())
	summaries := func() []observer.LoggedEntry { return logs.FilterMessageSnippet("not logged one by one").All() }
	require.Empty(t, summaries(), "no summary before its window has passed")

	now.Add(time.Minute.Milliseconds())
	submit(names, "invented-late")
	require.Len(t, summaries(), 1)
	require.EqualValues(t, 2*(names-ingest.MaxLoggedTypes)+1, summaries()[0].ContextMap()["signals"])
	require.Equal(t, ingest.MaxLoggedTypes, logs.FilterMessage("unknown device type; the default policy applies").Len())
	require.Equal(t, float64(2*names+1), counter(t, reg, "heartbeatd_signals_unknown_type_total", nil))
}

func TestChainDeadLettersBadInputBesideValidInput(t *testing.T) {
	ref := &fakeRefresher{}
	f := startChain(t, ref, ingest.ChainOptions{})
	f.submit(t, 0, ingest.Message{Key: []byte("ok-1")})
	f.submit(t, 1, ingest.Message{Topic: "signals", Key: []byte("k"), Payload: []byte(`{"device_id":`)})
	f.submit(t, 2, ingest.Message{Key: []byte("ok-2")})
	require.Eventually(t, func() bool { return f.acks.n() == 3 }, 5*time.Second, time.Millisecond)
	require.Len(t, ref.signals(), 2)
	dls := f.dl.letters()
	require.Len(t, dls, 1)
	require.Equal(t, ingest.ReasonMalformedJSON, dls[0].Reason)
	require.Equal(t, "kafka", dls[0].Source)
	require.Equal(t, "signals", dls[0].Topic)
	require.Equal(t, []byte(`{"device_id":`), dls[0].Payload)
	require.Equal(t, []byte("k"), dls[0].Key)
	require.Equal(t, 1.0, counter(t, f.reg, "heartbeatd_deadletters_total", map[string]string{"reason": "malformed_json"}))
	require.Equal(t, 1.0, counter(t, f.reg, "heartbeatd_signals_total", map[string]string{"result": "deadletter"}))
}

func TestChainDeadLetterFailureDoesNotHoldUpInput(t *testing.T) {
	ref := &fakeRefresher{}
	f := startChain(t, ref, ingest.ChainOptions{DeadLetterTimeout: 200 * time.Millisecond})
	f.dl.failing.Store(true)
	f.submit(t, 0, ingest.Message{})
	f.submit(t, 1, ingest.Message{Key: []byte("ok")})
	require.Eventually(t, func() bool { _, c := f.acks.snapshot(); return c[1] == 1 }, 5*time.Second, time.Millisecond,
		"the valid message does not wait for the failing dead letter")
	require.Eventually(t, func() bool { return f.acks.n() == 2 }, 5*time.Second, time.Millisecond,
		"the bad message is acknowledged once its dead letter was given up")
	require.Equal(t, 1.0, counter(t, f.reg, "heartbeatd_deadletters_lost_total", nil))
}

// TestChainDeadLettersAFloodLargerThanItsQueue: a burst of bad input far larger than the dead-letter
// queue loses no dead letter while the topic takes writes, and the valid message after it is applied.
func TestChainDeadLettersAFloodLargerThanItsQueue(t *testing.T) {
	const bad = 5000
	ref := &fakeRefresher{}
	f := startChain(t, ref, ingest.ChainOptions{})
	for i := range bad {
		f.submit(t, i, ingest.Message{}) // no device id
	}
	f.submit(t, bad, ingest.Message{Key: []byte("ok")})
	require.Eventually(t, func() bool { return f.acks.n() == bad+1 }, 20*time.Second, time.Millisecond)
	require.Len(t, f.dl.letters(), bad, "every bad message has its dead letter")
	require.Zero(t, counter(t, f.reg, "heartbeatd_deadletters_lost_total", nil))
	_, c := f.acks.snapshot()
	require.Equal(t, 1, c[bad], "the valid message is applied")
}

func TestChainStopsWithoutAcknowledgingUnwritten(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	ref := &fakeRefresher{}
	ref.fail.Store(true)
	c, err := ingest.NewChain(ref, nil, ingest.ChainOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	a := newAcks()
	require.NoError(t, c.Submit(ctx, ingest.Message{Device: "d", Ack: a.fn(0)}))
	require.Eventually(t, func() bool { return ref.calls.Load() > 0 }, 5*time.Second, time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	require.Zero(t, a.n())
	require.ErrorIs(t, c.Submit(context.Background(), ingest.Message{Device: "d"}), ingest.ErrChainStopped)
}

func TestChainMetricsRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := ingest.NewChain(&fakeRefresher{}, nil, ingest.ChainOptions{Registerer: reg})
	require.NoError(t, err)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var reasons []string
	for _, mf := range mfs {
		if mf.GetName() == "heartbeatd_deadletters_total" {
			for _, m := range mf.GetMetric() {
				reasons = append(reasons, m.GetLabel()[0].GetValue())
			}
		}
	}
	require.ElementsMatch(t, ingest.Reasons, reasons, "every reason is pre-created")
	_, err = ingest.NewChain(&fakeRefresher{}, nil, ingest.ChainOptions{Registerer: reg})
	require.Error(t, err, "a second chain on the same registry is refused")
}

// nopRefresher acknowledges every refresh at once: the chain's own cost, without Redis.
type nopRefresher struct{ n atomic.Int64 }

func (r *nopRefresher) Refresh(_ context.Context, sigs []deadline.Signal) error {
	r.n.Add(int64(len(sigs)))
	return nil
}

// BenchmarkChain measures Submit → batch → refresh → acknowledge with a refresher that costs nothing,
// from one submitting goroutine (as the Kafka source does).
func BenchmarkChain(b *testing.B) {
	for _, bc := range []struct {
		name    string
		payload []byte
		opts    ingest.ChainOptions
	}{
		{"opaque", nil, ingest.ChainOptions{}},
		{"json", []byte(`{"type":"gateway","ts":1795341600000}`), ingest.ChainOptions{}},
		{"json-coalesce", []byte(`{"type":"gateway","ts":1795341600000}`), ingest.ChainOptions{Coalesce: time.Second}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ref := &nopRefresher{}
			c, err := ingest.NewChain(ref, nil, bc.opts)
			require.NoError(b, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = c.Run(ctx) }()
			defer func() { cancel(); <-done }()
			keys := make([][]byte, 4096)
			for i := range keys {
				keys[i] = []byte(fmt.Sprintf("device-%08d", i))
			}
			var acked atomic.Int64
			ack := func() { acked.Add(1) }
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			n := 0
			for i := 0; b.Loop(); i++ {
				if err := c.Submit(ctx, ingest.Message{Source: ingest.SourceKafka, Key: keys[i%len(keys)], Payload: bc.payload, Ack: ack}); err != nil {
					b.Fatal(err)
				}
				n++
			}
			for acked.Load() < int64(n) {
				time.Sleep(time.Millisecond)
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "signals/s")
		})
	}
}
