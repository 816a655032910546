package benchrig

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// Timer is what a run starts and stops around the part it measures, so a Go benchmark's ns/op covers
// only that (*testing.B is one); nil times nothing.
type Timer interface {
	StartTimer()
	StopTimer()
}

type noTimer struct{}

func (noTimer) StartTimer() {}
func (noTimer) StopTimer()  {}

func orNoTimer(t Timer) Timer {
	if t == nil {
		return noTimer{}
	}
	return t
}

// measuredPrefix names the devices a run measures: device-0 … device-(n-1).
const measuredPrefix = "device-"

// LatenessOptions size a lateness run.
type LatenessOptions struct {
	// Devices are the measured devices; their deadlines are spread evenly over Window.
	Devices int
	Window  time.Duration
	// RefreshRate is the signals/s of the load that moves other devices' deadlines meanwhile (busy-…);
	// 0 runs it as fast as Redis takes it.
	RefreshRate int
	LoadTypes   []string // the load's types, as Load.Types
}

// LatenessResult is what a lateness run measured.
type LatenessResult struct {
	// Lateness is each measured event's time minus the deadline it reports (what
	// detection_lateness_seconds observes); Acked adds the publish to Kafka. Both sorted.
	Lateness, Acked []time.Duration
	Early           int       // events before their deadline, or acknowledged before it
	Wrong           int       // events that reported another deadline than scheduled
	FirstWrong      string    // the first of them
	Busy            int       // events for load devices the (possibly starved) load left silent
	First, Last     time.Time // the first deadline; the last acknowledgement
	Signals         int64     // load signals Redis acknowledged
	LoadTime        time.Duration
}

// Lateness schedules o.Devices deadlines spread evenly over o.Window and measures how late each is
// detected while a refresh load runs. It returns no result when the run could not be measured; a result
// and an error when detection fell behind (the result holds what did arrive) or reported wrong deadlines.
func (r *Rig) Lateness(ctx context.Context, o LatenessOptions, timer Timer) (*LatenessResult, error) {
	timer = orNoTimer(timer)
	n, window := o.Devices, o.Window
	if err := r.reset(ctx); err != nil {
		return nil, err
	}
	t0 := FirstDeadline(n)
	deadlineOf := func(i int) time.Time {
		return t0.Add(time.Duration(i) * window / time.Duration(n)).Truncate(time.Millisecond)
	}
	if err := r.scheduleBefore(ctx, n, deadlineOf); err != nil {
		return nil, err
	}
	stop := r.startScanner()
	loadCtx, cancel := context.WithCancel(ctx)
	var signals atomic.Int64
	loadDone := make(chan error, 1)
	loadStart := time.Now()
	go func() {
		loadDone <- RefreshLoad(loadCtx, r.Store, Load{Prefix: "busy-", Fleet: busyFleet(n, o.RefreshRate), Workers: 2,
			Types: o.LoadTypes, PerSec: o.RefreshRate}, &signals)
	}()
	timer.StartTimer()
	got, waitErr := r.Events.Wait(ctx, event.Interrupted, measuredPrefix, n, time.Until(t0)+window+time.Minute)
	timer.StopTimer()
	cancel()
	loadErr := <-loadDone
	res := &LatenessResult{First: t0, Signals: signals.Load(), LoadTime: time.Since(loadStart)}
	if err := errors.Join(loadErr, stop()); err != nil {
		return nil, errors.Join(waitErr, err)
	}
	if waitErr != nil {
		if ctx.Err() != nil {
			return nil, waitErr
		}
		// Detection fell behind: what did arrive shows how far behind.
		got = r.Events.snapshot()
	}
	for _, p := range got {
		if p.Kind != event.Interrupted {
			continue
		}
		id, ok := strings.CutPrefix(p.DeviceID, measuredPrefix)
		if !ok {
			res.Busy++
			continue
		}
		i, err := strconv.Atoi(id)
		if err != nil {
			return nil, fmt.Errorf("benchrig: event for %q: %w", p.DeviceID, err)
		}
		if !p.Deadline.Equal(deadlineOf(i)) {
			// Counted rather than fatal, so one run shows how often it happens next to the other figures.
			if res.Wrong == 0 {
				res.FirstWrong = fmt.Sprintf("device %d: deadline %s, scheduled %s", i, p.Deadline.Format(time.StampMilli), deadlineOf(i).Format(time.StampMilli))
			}
			res.Wrong++
			continue
		}
		l := p.At.Sub(p.Deadline)
		if l < 0 || p.AckedAt.Before(p.Deadline) {
			res.Early++
		}
		res.Lateness = append(res.Lateness, l)
		res.Acked = append(res.Acked, p.AckedAt.Sub(p.Deadline))
		res.Last = latest(res.Last, p.AckedAt)
	}
	slices.Sort(res.Lateness)
	slices.Sort(res.Acked)
	if res.Wrong > 0 {
		waitErr = errors.Join(waitErr, fmt.Errorf("benchrig: %d events reported another deadline than scheduled, first: %s", res.Wrong, res.FirstWrong))
	}
	return res, waitErr
}

// ExpiryResult is what an expiry run measured.
type ExpiryResult struct {
	Deadline time.Time // every device's
	Last     time.Time // when Kafka acknowledged the last event
	Early    int       // events before the deadline
}

// Expiry gives n devices one and the same deadline and measures until Kafka acknowledged every
// interrupted event.
func (r *Rig) Expiry(ctx context.Context, n int, timer Timer) (ExpiryResult, error) {
	timer = orNoTimer(timer)
	if err := r.reset(ctx); err != nil {
		return ExpiryResult{}, err
	}
	res := ExpiryResult{Deadline: FirstDeadline(n)}
	if err := r.scheduleBefore(ctx, n, func(int) time.Time { return res.Deadline }); err != nil {
		return res, err
	}
	stop := r.startScanner()
	timer.StartTimer()
	got, waitErr := r.Events.Wait(ctx, event.Interrupted, "", n, time.Minute)
	timer.StopTimer()
	if err := errors.Join(waitErr, stop()); err != nil {
		return res, err
	}
	for _, p := range got {
		if p.At.Before(res.Deadline) {
			res.Early++
		}
		res.Last = latest(res.Last, p.AckedAt)
	}
	return res, nil
}

// Recovered interrupts n devices, then has them signal again (untyped, as a device's message usually
// is), spread over two seconds in batches of 100, and returns, sorted, the time from each Refresh's
// return to Kafka acknowledging that device's recovered event. The rig's recorder needs room for 2n.
func (r *Rig) Recovered(ctx context.Context, n int, timer Timer) ([]time.Duration, error) {
	timer = orNoTimer(timer)
	const size = 100
	if err := r.reset(ctx); err != nil {
		return nil, err
	}
	d := FirstDeadline(n)
	if err := r.schedule(ctx, measuredPrefix, n, func(int) time.Time { return d }); err != nil {
		return nil, err
	}
	stop := r.startScanner()
	if _, err := r.Events.Wait(ctx, event.Interrupted, "", n, time.Minute); err != nil {
		return nil, errors.Join(err, stop())
	}
	r.Events.Reset()
	signalled := make(map[string]time.Time, n)
	timer.StartTimer()
	start := time.Now()
	batches := (n + size - 1) / size
	for k := range batches {
		if !loop.Sleep(ctx, time.Until(start.Add(time.Duration(k)*2*time.Second/time.Duration(batches)))) {
			return nil, errors.Join(ctx.Err(), stop())
		}
		batch := make([]deadline.Signal, 0, size)
		for i := k * size; i < min(n, (k+1)*size); i++ {
			batch = append(batch, deadline.Signal{Device: measuredPrefix + strconv.Itoa(i), Seen: time.Now()})
		}
		if err := r.Store.Refresh(ctx, batch); err != nil {
			return nil, errors.Join(err, stop())
		}
		returned := time.Now()
		for _, s := range batch {
			signalled[s.Device] = returned
		}
	}
	got, waitErr := r.Events.Wait(ctx, event.Recovered, "", n, time.Minute)
	timer.StopTimer()
	if err := errors.Join(waitErr, stop()); err != nil {
		return nil, err
	}
	var latency []time.Duration
	for _, p := range got {
		if p.Kind != event.Recovered {
			continue
		}
		at, ok := signalled[p.DeviceID]
		if !ok {
			return nil, fmt.Errorf("benchrig: recovered event for %s, which did not signal", p.DeviceID)
		}
		latency = append(latency, p.AckedAt.Sub(at))
	}
	slices.Sort(latency)
	return latency, nil
}

// scheduleBefore schedules the measured devices and fails when that outlasted the margin before the
// first deadline: detection would start before every deadline is written.
func (r *Rig) scheduleBefore(ctx context.Context, n int, deadlineOf func(i int) time.Time) error {
	if err := r.schedule(ctx, measuredPrefix, n, deadlineOf); err != nil {
		return err
	}
	if !time.Now().Before(deadlineOf(0)) {
		return fmt.Errorf("benchrig: scheduling %d devices outlasted the margin before the first deadline", n)
	}
	return nil
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
