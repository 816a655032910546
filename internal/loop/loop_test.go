package loop

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixJitter makes jitter return its lowest (false) or highest (true) value for the rest of the test.
func fixJitter(t *testing.T, high bool) {
	orig := jitter
	jitter = func(n time.Duration) time.Duration {
		if high {
			return n
		}
		return 0
	}
	t.Cleanup(func() { jitter = orig })
}

func TestDelayStaysInTheUpperHalfOfTheCappedExponential(t *testing.T) {
	const lo, hi = 10 * time.Millisecond, time.Second
	seen := map[time.Duration]bool{}
	for attempt := range 70 {
		d := min(lo<<min(attempt, 20), hi)
		for range 50 {
			got := Delay(attempt, lo, hi)
			require.GreaterOrEqual(t, got, d/2, "attempt %d", attempt)
			require.LessOrEqual(t, got, d, "attempt %d", attempt)
			if attempt == 0 {
				seen[got] = true
			}
		}
	}
	require.Greater(t, len(seen), 1, "the delays are jittered")
}

func TestDelayBounds(t *testing.T) {
	fixJitter(t, false)
	require.Equal(t, 5*time.Millisecond, Delay(0, 10*time.Millisecond, time.Second))
	require.Equal(t, 500*time.Millisecond, Delay(1000, 10*time.Millisecond, time.Second), "a huge attempt does not overflow")
	require.Equal(t, 50*time.Millisecond, Delay(3, 100*time.Millisecond, 20*time.Millisecond), "max below min is min")
	require.Equal(t, defaultMin/2, Delay(0, 0, time.Second))
	fixJitter(t, true)
	require.Equal(t, 80*time.Millisecond, Delay(3, 10*time.Millisecond, time.Second))
	require.Equal(t, time.Second, Delay(7, 10*time.Millisecond, time.Second), "capped")
	require.Equal(t, time.Hour, Delay(62, time.Nanosecond, time.Hour))
}

func TestBackoffDoublesCapsAndResets(t *testing.T) {
	fixJitter(t, true)
	b := Backoff{Min: 100 * time.Millisecond, Max: 500 * time.Millisecond}
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next())
	}
	ms := time.Millisecond
	require.Equal(t, []time.Duration{100 * ms, 200 * ms, 400 * ms, 500 * ms, 500 * ms}, got)
	b.Reset()
	require.Equal(t, 100*ms, b.Next())

	var zero Backoff
	require.Equal(t, defaultMin, zero.Next())
	for range 100 {
		zero.Next()
	}
	require.Equal(t, defaultMax, zero.Next())
}

func TestSleep(t *testing.T) {
	require.True(t, Sleep(context.Background(), time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.False(t, Sleep(ctx, time.Hour), "a done context ends the sleep")
	require.False(t, Sleep(ctx, 0))
}

// hooks records what Every and Retry report.
type hooks struct {
	mu        sync.Mutex
	failures  []int
	waits     []time.Duration
	recovered []int
}

func (h *hooks) onError(_ error, failures int, wait time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failures = append(h.failures, failures)
	h.waits = append(h.waits, wait)
}

func (h *hooks) onRecover(failures int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recovered = append(h.recovered, failures)
}

func TestEveryBacksOffOnErrorsAndReportsRecovery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var h hooks
	runs := 0
	boom := errors.New("boom")
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, Options{Interval: time.Millisecond, MaxBackoff: 4 * time.Millisecond, Immediate: true,
			OnError: h.onError, OnRecover: h.onRecover},
			func(context.Context) error {
				runs++
				switch {
				case runs <= 4 || runs == 7:
					return boom
				case runs == 9:
					cancel()
				}
				return nil
			})
	}()
	<-done
	require.Equal(t, 9, runs, "runs until ctx is done, then stops")
	require.Equal(t, []int{1, 2, 3, 4, 1}, h.failures)
	require.Equal(t, []int{4, 1}, h.recovered)
	ms := time.Millisecond
	caps := []time.Duration{ms, 2 * ms, 4 * ms, 4 * ms, ms}
	for i, w := range h.waits {
		require.GreaterOrEqual(t, w, caps[i]/2, "wait %d", i)
		require.LessOrEqual(t, w, caps[i], "wait %d: the backoff is capped and starts over after a success", i)
	}
}

func TestEveryWaitsOneIntervalUnlessImmediate(t *testing.T) {
	for _, immediate := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		ran := false
		Every(ctx, Options{Interval: time.Hour, Immediate: immediate}, func(context.Context) error {
			ran = true
			return nil
		})
		cancel()
		require.Equal(t, immediate, ran)
	}
}

func TestEveryDoesNotReportTheFailureOfAnEndingContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var h hooks
	Every(ctx, Options{Interval: time.Millisecond, Immediate: true, OnError: h.onError}, func(context.Context) error {
		cancel()
		return context.Canceled
	})
	require.Empty(t, h.failures)
}

func TestEveryRejectsAZeroInterval(t *testing.T) {
	require.Panics(t, func() { Every(context.Background(), Options{}, func(context.Context) error { return nil }) })
}

func TestRetry(t *testing.T) {
	boom, fatal := errors.New("boom"), errors.New("fatal")
	permanent := func(err error) bool { return errors.Is(err, fatal) }
	fast := Backoff{Min: time.Millisecond, Max: 2 * time.Millisecond}

	t.Run("until it works", func(t *testing.T) {
		var h hooks
		calls := 0
		err := Retry(context.Background(), RetryOptions{Backoff: fast, Permanent: permanent, OnError: h.onError},
			func(context.Context) error {
				if calls++; calls < 4 {
					return boom
				}
				return nil
			})
		require.NoError(t, err)
		require.Equal(t, 4, calls)
		require.Equal(t, []int{1, 2, 3}, h.failures)
	})
	t.Run("stops at a permanent error", func(t *testing.T) {
		calls := 0
		err := Retry(context.Background(), RetryOptions{Backoff: fast, Permanent: permanent}, func(context.Context) error {
			if calls++; calls < 3 {
				return boom
			}
			return fatal
		})
		require.ErrorIs(t, err, fatal)
		require.Equal(t, 3, calls)
	})
	t.Run("stops when ctx ends", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		calls := 0
		// Cancelled during the hour-long wait after the first failure.
		stop := func(error, int, time.Duration) { cancel() }
		err := Retry(ctx, RetryOptions{Backoff: Backoff{Min: time.Hour, Max: time.Hour}, OnError: stop}, func(context.Context) error {
			calls++
			return boom
		})
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, 1, calls)
	})
}

// TestPacerKeepsItsShare: a walk paced at 20% spends about four times each step's length waiting after
// it, and stops waiting when its context ends.
func TestPacerKeepsItsShare(t *testing.T) {
	p := Pacer{Share: 0.2}
	start := time.Now()
	require.NoError(t, p.Step(context.Background(), func() error { time.Sleep(20 * time.Millisecond); return nil }))
	require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "20ms of work at 20% is 100ms of walk")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, p.Step(ctx, func() error { time.Sleep(time.Millisecond); return nil }), context.Canceled)
	require.NoError(t, Pacer{}.Step(context.Background(), func() error { return nil }), "the zero Pacer does not pace")
}

// TestPacerOfSharesTheShareAmongTheParts: replicas walking their parts of the slots together keep the
// whole walk's share; a pacer that does not pace, and a whole part, stay as they are.
func TestPacerOfSharesTheShareAmongTheParts(t *testing.T) {
	p := Pacer{Share: 0.02}
	require.InDelta(t, 0.01, p.Of(32, 64).Share, 1e-12)
	require.InDelta(t, 0.02, p.Of(1, 3).Share*3, 1e-12, "three replicas' parts add up to the share")
	require.Equal(t, p, p.Of(64, 64))
	require.Equal(t, p, p.Of(0, 64), "no part: nothing to walk, and never a pacer that does not pace")
	require.Equal(t, Pacer{Share: 1}, Pacer{Share: 1}.Of(1, 64), "unpaced stays unpaced")
	require.Equal(t, Pacer{}, Pacer{}.Of(1, 64))
}
