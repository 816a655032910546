package ingest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/alarm"
	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
	"github.com/heartbeatd/heartbeatd/internal/scan"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/internal/testenv/deadlinetest"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// lateRig is the chain, the scanner and the alarm loop on one Redis, types default (300ms) and slow
// (1m), with late first words kept within a minute of their deadline (detection.max_hold_back).
type lateRig struct {
	t      *testing.T
	chain  *ingest.Chain
	events *testenv.EventLog
	reg    *prometheus.Registry
	acked  sync.WaitGroup
}

func startLateRig(t *testing.T) *lateRig {
	t.Helper()
	cfg, err := config.Parse([]byte(`
types:
  default: {timeout: 300ms, repeat_every: 0s}
  slow:    {timeout: 1m, repeat_every: 0s}
`), func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	pol := cfg.Policies()
	timeout := func(name string) time.Duration { p, _ := pol.Lookup(name); return p.Timeout }
	store := deadlinetest.NewStore(t, testenv.StartRedis(t).Client(t), deadline.Options{Slots: 8, Timeout: timeout, LateFirstWord: time.Minute},
		pol.Names()...)

	r := &lateRig{t: t, events: &testenv.EventLog{}, reg: prometheus.NewRegistry()}
	r.chain, err = ingest.NewChain(store, nil, ingest.ChainOptions{Registerer: r.reg,
		KnownType: func(name string) bool { _, ok := pol.Lookup(name); return ok }})
	require.NoError(t, err)
	handler := alarm.NewHandler(alarm.HandlerOptions{Store: store, Sink: r.events, Policies: func() *config.Policies { return pol }})
	scanner := scan.NewScanner(scan.ScannerOptions{Store: store, Slots: func() []int { return testenv.AllSlots(8) },
		Handle: handler.Handle, MaxIdleWait: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{r.chain.Run, scanner.Run} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return r
}

func (r *lateRig) signal(device, payload string) {
	r.t.Helper()
	r.acked.Add(1)
	require.NoError(r.t, r.chain.Submit(r.t.Context(), ingest.Message{Source: ingest.SourceMQTT, Device: device, Payload: []byte(payload), Ack: r.acked.Done}))
}

func (r *lateRig) waitFor(device string, want ...event.Kind) {
	r.t.Helper()
	require.Eventually(r.t, func() bool { return fmt.Sprint(testenv.Kinds(r.events.Of(device))) == fmt.Sprint(want) }, 10*time.Second,
		5*time.Millisecond, "%s: want %v", device, want)
}

func (r *lateRig) count(result string) float64 {
	r.t.Helper()
	return counter(r.t, r.reg, "heartbeatd_signals_total", map[string]string{"result": result})
}

// TestLateSignalsNeitherRecoverNorReopen: a device with an open incident sends signals whose deadline
// already passed (buffered ones older than their type's timeout but younger than the longest, and a
// clock at 2000-01-01): no `recovered`, no second `interrupted`, each counted as late. A fresh signal
// then recovers it.
func TestLateSignalsNeitherRecoverNorReopen(t *testing.T) {
	r := startLateRig(t)
	signal, waitFor := r.signal, r.waitFor
	first := time.Now()
	signal("d", "")
	waitFor("d", event.Interrupted)
	// Signals sent after the first, so their deadlines are later than the incident's, yet already past:
	// written, each would read as the device back (recovered) and silent again (interrupted).
	require.Eventually(t, func() bool { return time.Since(first) > time.Second }, 5*time.Second, 5*time.Millisecond)
	after := func(d time.Duration) int64 { return first.Add(d).UnixMilli() }
	signal("d", fmt.Sprintf(`{"ts":%d}`, after(200*time.Millisecond)))                  // untyped: its recorded type decides
	signal("d", fmt.Sprintf(`{"ts":%d,"type":"default"}`, after(300*time.Millisecond))) // typed
	signal("d", `{"ts":"2000-01-01T00:00:00Z"}`)                                        // older than every timeout
	r.acked.Wait()
	// Anything the late signals had written would be due at once, so before this later deadline.
	signal("marker", "")
	waitFor("marker", event.Interrupted)
	require.Equal(t, []event.Kind{event.Interrupted}, testenv.Kinds(r.events.Of("d")), "late signals neither recover nor reopen the incident")
	require.Equal(t, 3.0, r.count("late"))

	signal("d", "")
	waitFor("d", event.Interrupted, event.Recovered)
	r.acked.Wait()
	require.Equal(t, 3.0, r.count("applied"))
}

// TestLateFirstWordIsReported: the only signal of a device heartbeatd does not know arrives after its
// deadline (it waited in a dead replica's Kafka partition): the device is reported interrupted, typed or
// not, rather than never known. A signal whose deadline passed longer ago than the hold-back bound is
// history, not news: dropped as late.
func TestLateFirstWordIsReported(t *testing.T) {
	r := startLateRig(t)
	ago := func(d time.Duration) int64 { return time.Now().Add(-d).UnixMilli() }
	r.signal("untyped", fmt.Sprintf(`{"ts":%d}`, ago(2*time.Second)))
	r.signal("typed", fmt.Sprintf(`{"ts":%d,"type":"default"}`, ago(2*time.Second)))
	r.signal("ancient", `{"ts":"2000-01-01T00:00:00Z"}`)
	r.acked.Wait()
	r.waitFor("untyped", event.Interrupted)
	r.waitFor("typed", event.Interrupted)
	r.signal("marker", "")
	r.waitFor("marker", event.Interrupted)
	require.Empty(t, r.events.Of("ancient"), "older than the hold-back bound: dropped")
	require.Equal(t, 1.0, r.count("late"))
	require.Equal(t, 3.0, r.count("applied"))
	for _, d := range []string{"untyped", "typed"} {
		require.NotEmpty(t, r.events.Of(d), d)
		e := r.events.Of(d)[0]
		require.Less(t, e.Deadline.UnixMilli(), e.At.UnixMilli(), "%s: its deadline had passed", d)
	}
}
