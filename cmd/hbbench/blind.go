package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

func init() { register("blind", blindScenario) }

// The blind scenario: the binary ingests a mixed fleet over Kafka — meters with a 2 h timeout that
// signalled once, and live devices with a 3 s timeout that signal every 500 ms — when its consumer falls
// behind (fetches starved for blindStarve, past ingest.max_lag) and half the live devices stop at that
// moment. Their deadlines pass while ingest is blind; the figure is how late each is reported (event
// time − deadline), for the binary and, with -heartbeatd-baseline, the baseline in the same run.
const (
	blindLive     = 1000
	blindMeters   = 10_000
	blindTimeout  = 3 * time.Second
	blindInterval = 500 * time.Millisecond
	blindStarve   = 5 * time.Second
	// blindWait is how long the stopped devices are awaited after the starvation: far less than the
	// meters' hold (detection.max_hold_back, 10 min) that a grace of the longest timeout costs.
	blindWait = time.Minute
)

func blindScenario(e *env) error {
	bins := e.binaries()
	p99 := map[string]time.Duration{}
	for _, b := range bins {
		res, err := blindRound(e, b.path)
		if err != nil {
			return fmt.Errorf("hbbench: blind %s: %w", b.name, err)
		}
		note := fmt.Sprintf("%d of %d stopped 3s devices reported within %s; %d meters (2h) in the fleet", len(res.lateness),
			blindLive/2, blindWait, blindMeters)
		if len(res.lateness) == 0 {
			e.add("blind", b.name+" stopped devices reported", 0, "count", note)
			continue
		}
		p99[b.name] = benchrig.Quantile(res.lateness, 0.99)
		if b.name != "baseline" && p99["baseline"] > 0 {
			note += fmt.Sprintf("; p99 %.2fx baseline", float64(p99[b.name])/float64(p99["baseline"]))
		}
		e.add("blind", b.name+" lateness p50", benchrig.Ms(benchrig.Quantile(res.lateness, 0.5)), "ms", note)
		e.add("blind", b.name+" lateness p99", benchrig.Ms(p99[b.name]), "ms", "event time − deadline")
		e.add("blind", b.name+" lateness max", benchrig.Ms(benchrig.Quantile(res.lateness, 1)), "ms", "")
		e.add("blind", b.name+" false interruptions", float64(res.falses), "count", "live devices reported; must be 0")
	}
	return nil
}

// blindResult is one binary's round: the lateness of each stopped device reported (sorted), and how many
// devices that never stopped were reported.
type blindResult struct {
	lateness []time.Duration
	falses   int
}

func blindRound(e *env, bin string) (res blindResult, err error) {
	if err := e.redis.flush(e.ctx); err != nil {
		return res, err
	}
	k, err := benchrig.Kafka(4, signalTopic, benchrig.EventsTopic, "heartbeat.deadletter")
	if err != nil {
		return res, err
	}
	defer k.Close()
	var starved atomic.Bool
	k.StarveFetches(signalTopic, &starved)
	hb, err := launchOnKafkaWith(e, k, bin, "hbbench-blind", `
  default: {timeout: 3s, repeat_every: 0s}
  meter: {timeout: 2h, repeat_every: 0s}`)
	if err != nil {
		return res, err
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\nheartbeatd log:\n%s", err, hb.LogTail())
		}
		hb.Close()
	}()
	cl, err := kgo.NewClient(append(k.ClientOpts(), kgo.ConsumeTopics(benchrig.EventsTopic), kgo.DefaultProduceTopic(signalTopic))...)
	if err != nil {
		return res, err
	}
	defer cl.Close()

	meter := func(i int) string { return "meter-" + strconv.Itoa(i) }
	if err := produce(e.ctx, cl, blindMeters, meter, []byte(`{"type":"meter"}`)); err != nil {
		return res, err
	}
	live := func(i int) string { return "live-" + strconv.Itoa(i) }
	var stopped atomic.Bool // the odd live devices stop once set
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		loop.Every(ctx, loop.Options{Interval: blindInterval, Immediate: true}, func(ctx context.Context) error {
			n := blindLive
			if stopped.Load() {
				n = blindLive / 2 // the even ones, as ids 0, 2, 4, …
			}
			return produce(ctx, cl, n, func(i int) string {
				if stopped.Load() {
					return live(2 * i)
				}
				return live(i)
			}, nil)
		})
	})
	defer wg.Wait()
	defer cancel()
	// Steady first: every device known, ingest caught up.
	if err := awaitApplied(e, hb, blindMeters+blindLive*4); err != nil {
		return res, err
	}
	starved.Store(true)
	stopped.Store(true)
	if !loop.Sleep(e.ctx, blindStarve) {
		return res, e.ctx.Err()
	}
	starved.Store(false)

	got := map[string]time.Duration{}
	deadline := time.Now().Add(blindWait)
	for len(got) < blindLive/2 && time.Now().Before(deadline) {
		fctx, fcancel := context.WithDeadline(e.ctx, deadline)
		fetches := cl.PollFetches(fctx)
		fcancel()
		fetches.EachRecord(func(r *kgo.Record) {
			ev, err := event.Decode(r.Value)
			if err != nil || ev.Kind != event.Interrupted {
				return
			}
			num, ok := strings.CutPrefix(ev.DeviceID, "live-")
			i, err := strconv.Atoi(num)
			switch {
			case !ok || err != nil: // a meter: not due within the round
			case i%2 == 0:
				res.falses++
			default:
				got[ev.DeviceID] = ev.At.Sub(ev.Deadline)
			}
		})
	}
	for _, l := range got {
		res.lateness = append(res.lateness, l)
	}
	slices.Sort(res.lateness)
	return res, nil
}

// produce writes one signal per device id(0…n-1) with value and waits for the broker's acknowledgement.
func produce(ctx context.Context, cl *kgo.Client, n int, id func(int) string, value []byte) error {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Key: []byte(id(i)), Value: value}
	}
	return cl.ProduceSync(ctx, recs...).FirstErr()
}
