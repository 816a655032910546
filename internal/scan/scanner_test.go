package scan_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/scan"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// realTimeStore is a store on f's Redis with every timeout d and the real clock: the scanner must wake for
// the deadlines by itself.
func realTimeStore(t *testing.T, f fixture, d time.Duration) *deadline.Store {
	t.Helper()
	store, err := deadline.New(f.RDB, deadline.Options{Slots: 8, Timeout: func(string) time.Duration { return d }})
	require.NoError(t, err)
	return store
}

// runScanner runs a scanner over all 8 slots until ctx is done; got receives every claim it hands over
// (buffered for buffer claims) and done its Run's result.
func runScanner(ctx context.Context, opts scan.ScannerOptions, buffer int) (got <-chan deadline.Claim, done <-chan error) {
	claims := make(chan deadline.Claim, buffer)
	opts.Slots = func() []int { return testenv.AllSlots(8) }
	opts.Handle = func(_ context.Context, cs []deadline.Claim) error {
		for _, c := range cs {
			claims <- c
		}
		return nil
	}
	sc := scan.NewScanner(opts)
	result := make(chan error)
	go func() { result <- sc.Run(ctx) }()
	return claims, result
}

// awaitEachOnce receives claims from got until n devices were claimed, each once and none before its
// deadline, checking each claim with check too when it is not nil; it fails when 10 s pass without a
// claim (a loop that slept for its idle cap instead of until the next deadline).
func awaitEachOnce(t *testing.T, got <-chan deadline.Claim, n int, check func(deadline.Claim)) {
	t.Helper()
	seen := map[string]int{}
	for len(seen) < n {
		select {
		case c := <-got:
			if check != nil {
				check(c)
			}
			seen[c.Device]++
			require.Equal(t, 1, seen[c.Device], "%s claimed twice", c.Device)
			require.GreaterOrEqual(t, time.Now().UnixMilli(), c.State.Deadline, "%s claimed before its deadline", c.Device)
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d devices claimed: a loop slept for its idle cap instead of until the next deadline", len(seen), n)
		}
	}
}

// TestScannersSleepUntilTheNextDeadline: several claim loops over shares of the slots, with an idle cap of
// an hour, must still wake for each deadline they learned of — and claim every device exactly once.
func TestScannersSleepUntilTheNextDeadline(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// Real time: the deadlines pass while the loops sleep.
		store := realTimeStore(t, f, 300*time.Millisecond)
		const n = 24
		var sigs []deadline.Signal
		start := time.Now()
		for i := range n {
			sigs = append(sigs, deadline.Signal{Device: fmt.Sprintf("dev-%02d", i), Seen: start.Add(time.Duration(i) * 40 * time.Millisecond)})
		}
		require.NoError(t, store.Refresh(ctx, sigs))
		got, done := runScanner(ctx, scan.ScannerOptions{Store: store, MaxIdleWait: time.Hour, Lease: time.Hour, Batch: 16, Concurrency: 3}, 2*n)
		awaitEachOnce(t, got, n, nil)
		cancel()
		require.NoError(t, <-done)
	})
}

func TestScannerHandsClaimsAndStops(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// Real time here: the scanner must wake at the deadline by itself.
		store := realTimeStore(t, f, 200*time.Millisecond)
		got, done := runScanner(ctx, scan.ScannerOptions{Store: store, MaxIdleWait: time.Second, Lease: time.Minute, Batch: 16}, 10)
		require.NoError(t, store.Refresh(ctx, []deadline.Signal{{Device: "quiet", Seen: time.Now()}}))
		select {
		case c := <-got:
			require.Equal(t, "quiet", c.Device)
		case <-time.After(10 * time.Second):
			t.Fatal("scanner never claimed the silent device")
		}
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("scanner did not stop on cancel")
		}
	})
}

// TestIdleScannerPeeksAndStillClaimsOnTime: while nothing is due, the scanner's idle polls read the slots'
// earliest scores and run no claim script (the idle cost of a replica); a deadline written behind its
// back (another replica's signal) is still claimed.
func TestIdleScannerPeeksAndStillClaimsOnTime(t *testing.T) {
	eachFixture(t, 8, testIdleScannerPeeks)
}

func testIdleScannerPeeks(t *testing.T, f fixture) {
	rdb := f.RDB
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := realTimeStore(t, f, 400*time.Millisecond)
	// A device whose deadline is far off keeps the polls at their idle cap.
	far := realTimeStore(t, f, time.Hour)
	require.NoError(t, far.Refresh(ctx, []deadline.Signal{{Device: "far", Seen: time.Now()}}))
	got := make(chan deadline.Claim, 10)
	sc := scan.NewScanner(scan.ScannerOptions{Store: store, MaxIdleWait: 20 * time.Millisecond, Lease: time.Minute, Batch: 16, Concurrency: 2,
		Slots: func() []int { return testenv.AllSlots(8) },
		Handle: func(_ context.Context, cs []deadline.Claim) error {
			for _, c := range cs {
				got <- c
			}
			return nil
		}})
	done := make(chan error)
	go func() { done <- sc.Run(ctx) }()
	// Each loop's first wake-up claims; the polls after it only peek.
	require.Eventually(t, func() bool { return !sc.LastWakeUp().IsZero() }, 10*time.Second, 5*time.Millisecond)
	// Summed over a cluster's masters.
	calls := func(name string) int64 {
		cc, ok := rdb.(*redis.ClusterClient)
		if !ok {
			return testenv.CommandStats(t, rdb)[name].Calls
		}
		var n atomic.Int64
		require.NoError(t, cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
			n.Add(testenv.CommandStats(t, c)[name].Calls)
			return nil
		}))
		return n.Load()
	}
	scripts, peeks := calls("evalsha"), calls("zrange")
	require.Eventually(t, func() bool { return calls("zrange") >= peeks+4*2*8 }, 10*time.Second, 5*time.Millisecond, "the idle loops stopped polling")
	require.Equal(t, scripts, calls("evalsha"), "an idle poll ran a claim script")

	require.NoError(t, store.Refresh(ctx, []deadline.Signal{{Device: "quiet", Seen: time.Now()}}))
	select {
	case c := <-got:
		require.Equal(t, "quiet", c.Device)
		require.GreaterOrEqual(t, time.Now().UnixMilli(), c.State.Deadline, "claimed before its deadline")
	case <-time.After(10 * time.Second):
		t.Fatal("the scanner never claimed the device written behind its back")
	}
	cancel()
	require.NoError(t, <-done)
}

// TestScannerWakesForTypesNotHeld: while hold-back holds an hour-long type (after a blind window), the
// scanner still wakes for each deadline of a short type, past held deadlines before and between them,
// rather than polling at its idle cap (an hour here).
func TestScannerWakesForTypesNotHeld(t *testing.T) {
	eachFixture(t, 8, func(t *testing.T, f fixture) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		store, err := deadline.New(f.RDB, deadline.Options{Slots: 8, Timeout: func(typ string) time.Duration {
			if typ == "meter" {
				return time.Hour
			}
			return 300 * time.Millisecond
		}})
		require.NoError(t, err)
		require.NoError(t, store.Load(ctx, deadline.DefaultType, "meter"))
		const n = 24
		start := time.Now()
		var sigs []deadline.Signal
		for i := range n {
			at := start.Add(time.Duration(i) * 40 * time.Millisecond)
			sigs = append(sigs,
				deadline.Signal{Device: fmt.Sprintf("dev-%02d", i), Seen: at},
				// Held meters: one due already, one due between two devices.
				deadline.Signal{Device: fmt.Sprintf("meter-past-%02d", i), Type: "meter", Seen: at.Add(-2 * time.Hour)},
				deadline.Signal{Device: fmt.Sprintf("meter-%02d", i), Type: "meter", Seen: at.Add(-time.Hour + 320*time.Millisecond)})
		}
		require.NoError(t, store.Refresh(ctx, sigs))
		blindFrom := start.Add(-3 * time.Hour)
		meterHeld := func(now time.Time) deadline.WatermarkFunc {
			return func(timeout time.Duration) time.Time {
				if timeout >= time.Hour {
					return blindFrom
				}
				return now
			}
		}
		got, done := runScanner(ctx, scan.ScannerOptions{Store: store, Watermark: meterHeld, MaxIdleWait: time.Hour, Lease: time.Hour,
			Batch: 16, Concurrency: 3}, 2*n)
		awaitEachOnce(t, got, n, func(c deadline.Claim) { require.NotEqual(t, "meter", c.Type, "%s is held", c.Device) })
		cancel()
		require.NoError(t, <-done)
	})
}
