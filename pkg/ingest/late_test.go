package ingest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/alarm"
	"github.com/heartbeatd/heartbeatd/pkg/config"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
	"github.com/heartbeatd/heartbeatd/pkg/ingest"
)

// eventLog is an event.Sink that keeps every event, for tests that read what the alarm loop emits.
type eventLog struct {
	mu     sync.Mutex
	events []event.Event
}

func (l *eventLog) Publish(_ context.Context, events []event.Event) []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, events...)
	return make([]error, len(events))
}

// kinds lists the kinds of device's events in order.
func (l *eventLog) kinds(device string) []event.Kind {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []event.Kind
	for _, e := range l.events {
		if e.DeviceID == device {
			out = append(out, e.Kind)
		}
	}
	return out
}

// TestLateSignalsNeitherRecoverNorReopen runs the chain, the scanner and the alarm loop on one Redis. A
// device with an open incident sends signals whose deadline already passed (buffered ones older than
// their type's timeout but younger than the longest, and a clock at 2000-01-01): no `recovered`, no
// second `interrupted`, each counted as late. A fresh signal then recovers it.
func TestLateSignalsNeitherRecoverNorReopen(t *testing.T) {
	cfg, err := config.Parse([]byte(`
types:
  default: {timeout: 300ms, repeat_every: 0s}
  slow:    {timeout: 1m, repeat_every: 0s}
`), func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	pol := cfg.Policies()
	timeout := func(name string) time.Duration { p, _ := pol.Lookup(name); return p.Timeout }
	store, err := deadline.New(testenv.StartRedis(t).Client(t), deadline.Options{Slots: 8, Timeout: timeout})
	require.NoError(t, err)
	require.NoError(t, store.Load(t.Context(), pol.Names()...))

	reg := prometheus.NewRegistry()
	chain, err := ingest.NewChain(store, nil, ingest.ChainOptions{Registerer: reg,
		KnownType: func(name string) bool { _, ok := pol.Lookup(name); return ok }})
	require.NoError(t, err)
	events := &eventLog{}
	handler := alarm.NewHandler(alarm.HandlerOptions{Store: store, Sink: events, Policies: func() *config.Policies { return pol }})
	scanner := deadline.NewScanner(deadline.ScannerOptions{Store: store, Slots: func() []int { return testenv.AllSlots(8) },
		Handle: handler.Handle, MaxIdleWait: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{chain.Run, scanner.Run} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })

	var acked sync.WaitGroup
	signal := func(device, payload string) {
		t.Helper()
		acked.Add(1)
		require.NoError(t, chain.Submit(ctx, ingest.Message{Source: ingest.SourceMQTT, Device: device, Payload: []byte(payload), Ack: acked.Done}))
	}
	waitFor := func(device string, kinds ...event.Kind) {
		t.Helper()
		require.Eventually(t, func() bool { return fmt.Sprint(events.kinds(device)) == fmt.Sprint(kinds) }, 10*time.Second,
			5*time.Millisecond, "%s: want %v", device, kinds)
	}

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
	acked.Wait()
	// Anything the late signals had written would be due at once, so before this later deadline.
	signal("marker", "")
	waitFor("marker", event.Interrupted)
	require.Equal(t, []event.Kind{event.Interrupted}, events.kinds("d"), "late signals neither recover nor reopen the incident")
	require.Equal(t, 3.0, counter(t, reg, "heartbeatd_signals_total", map[string]string{"result": "late"}))

	signal("d", "")
	waitFor("d", event.Interrupted, event.Recovered)
	acked.Wait()
	require.Equal(t, 3.0, counter(t, reg, "heartbeatd_signals_total", map[string]string{"result": "applied"}))
}
