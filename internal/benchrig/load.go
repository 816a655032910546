package benchrig

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/loop"
)

// Load describes a refresh load: batches of 256 signals for devices Prefix0..Fleet-1, as ingest sends
// them.
type Load struct {
	Prefix  string
	Fleet   int
	Workers int // batches in flight
	// Types: device i signals with type Types[i%len(Types)]; none means untyped signals.
	Types  []string
	PerSec int // 0: as fast as Redis takes them
	// Periodic: devices signal in index order, over and over, as a fleet on a fixed period and phase
	// does (RefreshBatches writes them in that order); otherwise each signal is from a device drawn at
	// random.
	Periodic bool
}

// RefreshLoad sends the load until ctx ends and counts the signals Redis acknowledged in sent.
func RefreshLoad(ctx context.Context, st *deadline.Store, l Load, sent *atomic.Int64) error {
	const size = 256
	var wg sync.WaitGroup
	errs := make(chan error, l.Workers)
	var next atomic.Int64 // the periodic order's position
	start := time.Now()
	for w := range l.Workers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			batch := make([]deadline.Signal, size)
			for k := 0; ctx.Err() == nil; k++ {
				if l.PerSec > 0 {
					// Batch k of this worker is due at k·size·workers/rate.
					due := start.Add(time.Duration(k) * time.Duration(size*l.Workers) * time.Second / time.Duration(l.PerSec))
					if !loop.Sleep(ctx, time.Until(due)) {
						return
					}
				}
				now := time.Now()
				var pos int
				if l.Periodic {
					pos = int(next.Add(size)) - size
				}
				for j := range batch {
					var d int
					if l.Periodic {
						d = (pos + j) % l.Fleet
					} else {
						d = rnd.IntN(l.Fleet)
					}
					batch[j] = deadline.Signal{Device: l.Prefix + strconv.Itoa(d), Seen: now}
					if len(l.Types) > 0 {
						batch[j].Type = l.Types[d%len(l.Types)]
					}
				}
				if err := st.Refresh(ctx, batch); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				sent.Add(size)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// busyFleet sizes the lateness run's load fleet so each of its devices is refreshed about every 2 s
// (P(silent for the 30 s timeout) ≈ e^-15): at 50k signals/s a 1M fleet would leave a fifth of it silent
// past its timeout, and its events would load the scanner beside the measured devices'.
func busyFleet(n, perSec int) int {
	if perSec <= 0 {
		return max(n, 10_000)
	}
	return max(10_000, min(n, 2*perSec))
}
