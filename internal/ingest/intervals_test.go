package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

// sampledIDs returns n device ids in the advice sample, named prefix-<i>.
func sampledIDs(prefix string, n int) []string {
	var ids []string
	for i := 0; len(ids) < n; i++ {
		if id := fmt.Sprintf("%s-%d", prefix, i); Sampled(id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// slotOf is the table slot a device id lands in.
func slotOf(id string) uint64 { return (deviceKey(id) * 0x9E3779B97F4A7C15) >> (64 - adviceSlotBits) }

// policies is a policy table of the given types (name → timeout) besides default's 1m.
func policies(types map[string]time.Duration) *config.Policies {
	cfg := &config.Config{Types: map[string]config.TypePolicy{"default": {Timeout: new(time.Minute)}}}
	for name, timeout := range types {
		cfg.Types[name] = config.TypePolicy{Timeout: new(timeout)}
	}
	return cfg.Policies()
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestSuggestTimeout(t *testing.T) {
	for _, tc := range []struct{ p99, want time.Duration }{
		{100 * time.Millisecond, time.Second}, // 300ms: at least a second
		{200 * time.Millisecond, time.Second}, // 600ms
		{time.Second, 3 * time.Second},
		{10*time.Second + time.Millisecond, 31 * time.Second},
		{19*time.Second + 900*time.Millisecond, 60 * time.Second}, // 59.7s: whole seconds
		{20 * time.Second, time.Minute},
		{31 * time.Second, 100 * time.Second},                                 // 93s: tens of seconds
		{3*time.Minute + 18*time.Second, 10 * time.Minute},                    // 9m54s
		{3*time.Minute + 20*time.Second + time.Millisecond, 11 * time.Minute}, // just past 10m: whole minutes
		{time.Hour, 3 * time.Hour},
	} {
		require.Equal(t, tc.want, suggestTimeout(tc.p99), "p99 %v", tc.p99)
	}
}

func TestDurationJSON(t *testing.T) {
	for d, want := range map[time.Duration]string{
		200*time.Millisecond + 400*time.Microsecond: `"200ms"`,
		31*time.Second + 234567*time.Microsecond:    `"31.235s"`,
		2 * time.Minute:                             `"2m"`,
		100 * time.Second:                           `"1m40s"`,
		90*time.Minute + 400*time.Millisecond:       `"1h30m"`,
		3 * time.Hour:                               `"3h"`,
	} {
		got, err := json.Marshal(Duration(d))
		require.NoError(t, err)
		require.Equal(t, want, string(got))
		back, err := time.ParseDuration(want[1 : len(want)-1])
		require.NoError(t, err)
		require.InDelta(t, d, back, float64(time.Second))
	}
}

// A device's intervals go from signal time to signal time; the percentiles are nearest-rank over the
// type's ring.
func TestIntervalsPercentiles(t *testing.T) {
	s := newIntervals()
	ids := sampledIDs("meter", 2)
	at := map[string]time.Time{ids[0]: t0, ids[1]: t0}
	for _, id := range ids {
		s.observe(id, "meter", t0)
	}
	// 100 intervals of 1ms..100ms, alternating between the two devices.
	for i := 1; i <= 100; i++ {
		id := ids[i%2]
		at[id] = at[id].Add(time.Duration(i) * time.Millisecond)
		s.observe(id, "meter", at[id])
	}
	got := s.Advise("r1", policies(map[string]time.Duration{"meter": 30 * time.Second, "idle": time.Hour}))
	require.Equal(t, TimeoutAdvice{Replica: "r1", Types: map[string]TypeAdvice{
		"default": {Timeout: Duration(time.Minute)},
		"idle":    {Timeout: Duration(time.Hour)},
		"meter": {Timeout: Duration(30 * time.Second), Devices: 2, Samples: 100, P50: Duration(50 * time.Millisecond),
			P99: Duration(99 * time.Millisecond), SuggestedTimeout: Duration(time.Second)},
	}}, got)

	// Below AdviceMinSamples the percentiles are shown, no timeout suggested.
	s = newIntervals()
	s.observe(ids[0], "meter", t0)
	s.observe(ids[0], "meter", t0.Add(time.Second))
	a := s.Advise("r1", policies(map[string]time.Duration{"meter": 30 * time.Second})).Types["meter"]
	require.Equal(t, TypeAdvice{Timeout: Duration(30 * time.Second), Devices: 1, Samples: 1, P50: Duration(time.Second),
		P99: Duration(time.Second)}, a)
}

// What an observed interval is, signal by signal.
func TestIntervalsWhatCounts(t *testing.T) {
	ids := sampledIDs("dev", 3)
	a, b, c := ids[0], ids[1], ids[2]
	s := newIntervals()
	notSampled := "dev-x"
	for Sampled(notSampled) {
		notSampled += "x"
	}
	s.observe(notSampled, "meter", t0)
	s.observe(notSampled, "meter", t0.Add(time.Second))

	s.observe(a, "meter", t0)
	s.observe(a, "meter", t0.Add(10*time.Second))
	s.observe(a, "meter", t0.Add(5*time.Second))  // out of order: no interval, the start stays at 10s
	s.observe(a, "meter", t0.Add(10*time.Second)) // replayed: none
	s.observe(a, "", t0.Add(30*time.Second))      // names no type: the type a last named, 20s

	s.observe(b, "", t0) // never named a type: default
	s.observe(b, "", t0.Add(7*time.Second))
	s.observe(b, "meter", t0.Add(9*time.Second)) // names one now: moves to meter, 2s there

	s.observe(c, "meter", t0)
	s.observe(c, "meter", t0.Add(25*time.Hour)) // back after more than adviceForget: starts over

	require.Equal(t, []time.Duration{10 * time.Second, 20 * time.Second, 2 * time.Second}, s.types[s.index["meter"]-1].ring)
	require.Equal(t, []time.Duration{7 * time.Second}, s.types[s.index[deadline.DefaultType]-1].ring)
	require.Equal(t, 3, s.types[s.index["meter"]-1].devices)
	require.Equal(t, 0, s.types[s.index[deadline.DefaultType]-1].devices)
}

// The newest AdviceMaxIntervals intervals of a type are kept, the oldest replaced.
func TestIntervalsRingKeepsTheNewest(t *testing.T) {
	s := newIntervals()
	id := sampledIDs("ring", 1)[0]
	at := t0
	s.observe(id, "meter", at)
	for range adviceMaxIntervals {
		at = at.Add(time.Hour)
		s.observe(id, "meter", at)
	}
	for range adviceMaxIntervals {
		at = at.Add(time.Second)
		s.observe(id, "meter", at)
	}
	a := s.Advise("", policies(map[string]time.Duration{"meter": time.Minute})).Types["meter"]
	require.Equal(t, adviceMaxIntervals, a.Samples)
	require.Equal(t, Duration(time.Second), a.P99)
	require.Len(t, s.types[0].ring, adviceMaxIntervals)
	require.Equal(t, adviceMaxIntervals, cap(s.types[0].ring))
}

// Hostile input: endless new ids and endless type names grow nothing, and displace none of the devices
// already followed.
func TestIntervalsBoundedUnderAFlood(t *testing.T) {
	s := newIntervals()
	// Devices followed before the flood: each in a slot of its own.
	var resident []string
	seen := map[uint64]bool{}
	for _, id := range sampledIDs("resident", 64) {
		if !seen[slotOf(id)] {
			seen[slotOf(id)] = true
			resident = append(resident, id)
			s.observe(id, "meter", t0)
		}
	}
	const flood = 1 << 19
	sampled := 0
	for i := range flood {
		id := fmt.Sprintf("flood-%d", i)
		if Sampled(id) {
			sampled++
		}
		s.observe(id, "meter", t0.Add(time.Duration(i)*time.Microsecond))
		s.observe(id, "meter", t0.Add(time.Duration(i)*time.Microsecond+time.Millisecond))
	}
	require.Greater(t, sampled, 4*adviceMaxDevices, "the flood offers far more sampled ids than a type follows")
	meter := s.types[s.index["meter"]-1]
	require.Equal(t, adviceMaxDevices, meter.devices)
	require.Len(t, s.slots, 1<<adviceSlotBits)
	require.Equal(t, adviceMaxDevices-len(resident), len(meter.ring), "one interval from each newcomer followed")
	require.Equal(t, adviceMaxDevices, followedCount(s), "a slot is counted by the type holding it")

	// The residents were not displaced: their next signal is an interval.
	for _, id := range resident {
		s.observe(id, "meter", t0.Add(5*time.Second))
	}
	require.Equal(t, adviceMaxDevices, len(meter.ring))
	require.Equal(t, 5*time.Second, meter.ring[len(meter.ring)-1])
	require.Equal(t, adviceMaxDevices, meter.devices)

	// Endless type names (a chain without KnownType): at most deadline.MaxTypes are kept.
	ids := sampledIDs("typed", 2*deadline.MaxTypes)
	for i, id := range ids {
		s.observe(id, fmt.Sprintf("type-%d", i), t0)
	}
	require.Len(t, s.types, deadline.MaxTypes)
	require.Len(t, s.index, deadline.MaxTypes)
	require.Len(t, s.slots, 1<<adviceSlotBits)
}

func followedCount(s *Intervals) int {
	n := 0
	for _, f := range s.slots {
		if f.key != 0 {
			n++
		}
	}
	return n
}

// A device silent past adviceForget gives its slot to the next device that lands there, so a fleet that
// is replaced is sampled again.
func TestIntervalsForgetTheGone(t *testing.T) {
	slot := func(key uint64) uint64 { return (key * 0x9E3779B97F4A7C15) >> (64 - adviceSlotBits) }
	const old = uint64(1)
	newcomer := old + 1
	for slot(newcomer) != slot(old) {
		newcomer++
	}
	at := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	s := newIntervals()
	s.note(old, "meter", at(0))
	s.note(newcomer, "meter", at(time.Hour)) // the old one is still within adviceForget: kept
	s.note(newcomer, "meter", at(time.Hour+time.Second))
	require.Empty(t, s.types[0].ring)

	s.note(newcomer, "meter", at(adviceForget+time.Second))
	s.note(newcomer, "meter", at(adviceForget+3*time.Second))
	require.Equal(t, []time.Duration{2 * time.Second}, s.types[0].ring)
	require.Equal(t, 1, s.types[0].devices)
}

// Sources submit from several goroutines while the API reads the advice (run with -race).
func TestIntervalsConcurrent(t *testing.T) {
	const workers, perWorker, signals = 8, 40, 20
	s := newIntervals()
	types := map[string]time.Duration{}
	for w := range workers {
		types[fmt.Sprintf("type-%d", w)] = time.Minute
	}
	pol := policies(types)
	// The API reads the advice from before the first signal until after the last.
	reading, stop, stopped := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for i := 0; ; i++ {
			s.Advise("r", pol)
			if i == 0 {
				close(reading)
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	<-reading
	slots := map[uint64]bool{}
	var wg sync.WaitGroup
	for w := range workers {
		ids := sampledIDs(fmt.Sprintf("w%d", w), perWorker)
		var others []string // most of the fleet
		for i := 0; len(others) < perWorker; i++ {
			if id := fmt.Sprintf("w%d-other-%d", w, i); !Sampled(id) {
				others = append(others, id)
			}
		}
		for _, id := range ids {
			slots[slotOf(id)] = true
		}
		wg.Go(func() {
			typ := fmt.Sprintf("type-%d", w)
			for i := range signals {
				for j, id := range ids {
					s.observe(id, typ, t0.Add(time.Duration(i)*time.Second))
					s.observe(others[j], typ, t0.Add(time.Duration(i)*time.Second))
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-stopped

	// Each slot is held by the first device that landed in it, which then saw all its intervals.
	devices, samples := 0, 0
	for _, a := range s.Advise("r", pol).Types {
		devices += a.Devices
		samples += a.Samples
		if a.Samples > 0 {
			require.Equal(t, Duration(time.Second), a.P99)
		}
	}
	require.Equal(t, len(slots), devices)
	require.Equal(t, len(slots)*(signals-1), samples)
}

// nopRefresher takes every batch at once: the benchmark measures the chain, not Redis.
type nopRefresher struct{}

func (nopRefresher) Refresh(context.Context, []deadline.Signal) error { return nil }

// BenchmarkIntervalsHook: what the advice sample costs each signal through Chain.Submit (no Redis: a
// refresher that takes every batch), against a chain with the hook off in the same run. Each iteration
// submits one signal from each of 100k devices (1/64 of them sampled) to both chains, alternating in
// chunks of 1000 so that load from elsewhere falls on both alike; reported: ns/signal of each and their
// ratio (x-without).
func BenchmarkIntervalsHook(b *testing.B) {
	const devices, chunk = 100_000, 1000
	msgs := make([]Message, devices)
	for i := range msgs {
		msgs[i] = Message{Source: SourceMQTT, Device: fmt.Sprintf("device-%06d", i), Type: "meter"}
	}
	known := func(name string) bool { return name == "meter" || name == deadline.DefaultType }
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	start := func(hook bool) *Chain {
		c, err := NewChain(nopRefresher{}, nil, ChainOptions{KnownType: known})
		require.NoError(b, err)
		if !hook {
			c.intervals = nil
		}
		wg.Go(func() { _ = c.Run(ctx) })
		return c
	}
	hooked, plain := start(true), start(false)
	submit := func(c *Chain, part []Message) time.Duration {
		t := time.Now()
		for i := range part {
			if err := c.Submit(ctx, part[i]); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(t)
	}
	var with, without time.Duration
	for i := 0; b.Loop(); i++ {
		for from := 0; from < devices; from += chunk {
			part := msgs[from : from+chunk]
			if (i+from/chunk)%2 == 0 {
				without += submit(plain, part)
				with += submit(hooked, part)
			} else {
				with += submit(hooked, part)
				without += submit(plain, part)
			}
		}
	}
	n := float64(b.N) * devices
	b.ReportMetric(float64(with.Nanoseconds())/n, "ns/signal")
	b.ReportMetric(float64(without.Nanoseconds())/n, "ns/signal-without")
	b.ReportMetric(float64(with)/float64(without), "x-without")
}

// BenchmarkIntervalsObserve: the hook alone, for a device outside the sample and one in it.
func BenchmarkIntervalsObserve(b *testing.B) {
	s := newIntervals()
	for _, tc := range []struct {
		name string
		ids  []string
	}{
		{"unsampled", func() []string {
			var ids []string
			for i := 0; len(ids) < 1024; i++ {
				if id := fmt.Sprintf("device-%06d", i); !Sampled(id) {
					ids = append(ids, id)
				}
			}
			return ids
		}()},
		{"sampled", sampledIDs("device", 1024)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			at := t0
			for i := 0; b.Loop(); i++ {
				at = at.Add(time.Millisecond)
				s.observe(tc.ids[i%len(tc.ids)], "meter", at)
			}
		})
	}
}
