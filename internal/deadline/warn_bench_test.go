package deadline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/internal/testenv/deadlinetest"
)

// BenchmarkWarnAfterCost is the A/B of what early warning costs a type without warn_after, on the same
// Redis in the same run, batch for batch interleaved (a shared machine's speed drifts): store "off" runs
// under policies where no type warns, store "on" under policies where another type (`warned`) does, so
// each signal's policy lookup is made; both refresh and claim the same fleet of unwarned types. on/off
// is the ratio of their times (1 = nothing paid).
func BenchmarkWarnAfterCost(b *testing.B) {
	rdb := testenv.StartRedis(b).Client(b)
	ctx := context.Background()
	types := "{default: {timeout: 1m}, gateway: {timeout: 30s}, sensor: {timeout: 10m}"
	stores := map[string]*deadline.Store{}
	for _, name := range []string{"off", "on"} {
		yml := "types: " + types + "}\n"
		if name == "on" {
			yml = "types: " + types + ", warned: {timeout: 1m, warn_after: 20s}}\n"
		}
		cfg, err := config.Parse([]byte(yml), func(string) (string, bool) { return "", false })
		require.NoError(b, err)
		pol := cfg.Policies()
		timeout := func(n string) time.Duration { p, _ := pol.Lookup(n); return p.Timeout }
		stores[name] = deadlinetest.NewStore(b, rdb, deadline.Options{KeyPrefix: "hb-" + name, Slots: 64, Timeout: timeout,
			WarnAfter: pol.WarnAfter}, append(benchTypes, "warned")...)
	}
	const batch = 256
	signals := func(round, i int, typed bool) []deadline.Signal {
		out := make([]deadline.Signal, batch)
		for j := range out {
			k := (i*batch + j) % 10_000
			out[j] = deadline.Signal{Device: fmt.Sprintf("r%d-device-%05d", round, k), Seen: time.Now().Add(-time.Hour)}
			if typed {
				out[j].Type = benchTypes[k%3]
			}
		}
		return out
	}
	for _, path := range []string{"refresh/typed", "refresh/untyped", "claim"} {
		b.Run(path, func(b *testing.B) {
			var took [2]time.Duration
			round := 0
			for b.Loop() {
				round++
				for k, name := range []string{"off", "on"} {
					if round%2 == 0 { // alternate which goes first
						name = []string{"on", "off"}[k]
					}
					st := stores[name]
					var d time.Duration
					if path == "claim" {
						d = timeClaim(b, st, signals(round, 0, true))
					} else {
						for i := range 8 {
							sigs := signals(0, i, path == "refresh/typed")
							for j := range sigs {
								sigs[j].Seen = time.Now()
							}
							start := time.Now()
							require.NoError(b, st.Refresh(ctx, sigs))
							d += time.Since(start)
						}
					}
					if name == "off" {
						took[0] += d
					} else {
						took[1] += d
					}
				}
			}
			b.ReportMetric(float64(took[0].Nanoseconds())/float64(b.N), "off-ns/round")
			b.ReportMetric(float64(took[1].Nanoseconds())/float64(b.N), "on-ns/round")
			b.ReportMetric(took[1].Seconds()/took[0].Seconds(), "on/off")
		})
	}
}

// timeClaim writes sigs (already past their deadlines) and times claiming them all, batch by batch, as a
// scanner does; the claims are left leased.
func timeClaim(b *testing.B, st *deadline.Store, sigs []deadline.Signal) time.Duration {
	b.Helper()
	ctx := context.Background()
	require.NoError(b, st.Refresh(ctx, sigs))
	start := time.Now()
	claimed := 0
	for {
		res, err := st.Claim(ctx, testenv.AllSlots(64), deadline.ClaimOptions{Now: time.Now(), Lease: time.Hour, Batch: 256})
		require.NoError(b, err)
		claimed += len(res.Claims)
		if !res.More {
			break
		}
	}
	d := time.Since(start)
	require.Equal(b, len(sigs), claimed)
	return d
}
