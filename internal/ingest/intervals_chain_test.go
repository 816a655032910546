package ingest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/ingest"
)

// The chain samples every valid signal it accepts, coalesced ones included, by the type it resolved
// (an unknown name counts under default); bad input adds nothing.
func TestChainSamplesIntervals(t *testing.T) {
	var ids []string
	for i := 0; len(ids) < 2; i++ {
		if id := fmt.Sprintf("chain-%d", i); ingest.Sampled(id) {
			ids = append(ids, id)
		}
	}
	gw, odd := ids[0], ids[1]
	f := startChain(t, &fakeRefresher{}, ingest.ChainOptions{KnownType: knownType, Coalesce: 10 * time.Second})
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	signal := func(id int, device, typ string, at time.Time) {
		f.submit(t, id, ingest.Message{Key: []byte(device), Payload: fmt.Appendf(nil, `{"type":%q,"ts":%d}`, typ, at.UnixMilli())})
	}
	for i := range 150 { // every second: all but one in ten coalesced
		signal(i, gw, "gateway", t0.Add(time.Duration(i)*time.Second))
	}
	f.submit(t, 150, ingest.Message{Key: []byte(gw), Payload: []byte(`{"ts":"yesterday"}`)}) // bad_ts: dead-lettered
	for i := range 3 {
		signal(200+i, odd, "no-such-type", t0.Add(time.Duration(i)*5*time.Second))
	}
	require.Eventually(t, func() bool { return f.acks.n() == 154 }, 5*time.Second, time.Millisecond)
	require.GreaterOrEqual(t, counter(t, f.reg, "heartbeatd_signals_total", map[string]string{"result": "coalesced"}), 130.0)

	cfg := &config.Config{Types: map[string]config.TypePolicy{"gateway": {Timeout: new(30 * time.Second)}}}
	got := f.chain.Intervals().Advise("r1", cfg.Policies())
	require.Equal(t, ingest.TypeAdvice{Timeout: ingest.Duration(30 * time.Second), Devices: 1, Samples: 149,
		P50: ingest.Duration(time.Second), P99: ingest.Duration(time.Second), SuggestedTimeout: ingest.Duration(3 * time.Second)},
		got.Types["gateway"])
	require.Equal(t, 1, got.Types["default"].Devices)
	require.Equal(t, 2, got.Types["default"].Samples)
	require.Equal(t, ingest.Duration(5*time.Second), got.Types["default"].P50)
}
