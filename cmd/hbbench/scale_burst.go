package main

// The scale scenario's burst: a tenth of the fleet's size in new devices signalling once over Kafka,
// their deadlines spread over -scale-window, detected among the fleet while its walks run.

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// burstPrefix names the burst's devices.
const burstPrefix = "burst-"

func burstID(i int) string { return burstPrefix + strconv.Itoa(i) }

// burstLateness is how late the burst's deadlines were detected: when a consumer of the events topic
// received each interrupted event, minus the deadline the event reports.
type burstLateness struct {
	p50, p99, max time.Duration
	raisedP99     time.Duration // the event's own time (heartbeatd raised it) minus its deadline
	early         int           // events received before their deadline
	spread        time.Duration // from the first deadline to the last
	// byTwentieth is the mean lateness of the deadlines in each twentieth of the spread, in order: a
	// stall shows as a few late twentieths, a rate the host cannot keep up with as a rising line.
	byTwentieth []time.Duration
}

// burstTwentieths is how many parts of the spread byTwentieth has.
const burstTwentieths = 20

// scaleBurst has f.devices/10 (at least 1000) new devices of type burst signal once over Kafka, spread
// over -scale-window, and measures Redis's used_memory growth per such device once every signal is
// applied (their deadlines lie three windows after their signals, none detected yet), then the lateness
// of their interrupted events.
func scaleBurst(e *env, k *testenv.Kafka, replicas []*testenv.Heartbeatd, tag string, f *scaleFigures) error {
	n := max(1000, f.devices/10)
	f.burst = n
	window := e.opts.ScaleWindow
	events, err := collectInterrupted(e.ctx, k, burstPrefix, n)
	if err != nil {
		return err
	}
	defer events.stop()
	applied, err := appliedSignals(replicas)
	if err != nil {
		return err
	}
	before, err := e.redis.usedMemory(e.ctx)
	if err != nil {
		return err
	}
	// Before the burst's signals, so that touching gigabytes is over before anything is measured.
	defer prefaultHeap(n * burstHeapPerDevice)()
	set0, err := slotSet(e)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := writePaced(e.ctx, k, n, window, burstID, []byte(`{"type":"burst"}`)); err != nil {
		return err
	}
	if err := awaitAppliedBy(e, replicas, applied+n); err != nil {
		return err
	}
	after, err := e.redis.usedMemory(e.ctx)
	if err != nil {
		return err
	}
	set1, err := slotSet(e)
	if err != nil {
		return err
	}
	note := fmt.Sprintf("used_memory growth / %d devices signalling once over Kafka, unregistered; slot 0's deadlines set %d → %d "+
		"members, MEMORY USAGE %+.0f B a member added: both move by a whole hash table where a set's table doubles or "+
		"finishes rehashing", n, set0.members, set1.members, float64(set1.bytes-set0.bytes)/float64(max(1, set1.members-set0.members)))
	if time.Since(start) > 3*window {
		note += "; applied after the first deadline passed: includes some incidents"
	}
	e.add("scale", tag+" Redis memory growth per signalling device", float64(after-before)/float64(n), "B", note)
	// What a signalling device costs is its member of its slot's deadlines set, the set's hash table
	// included: the set's average per member, whatever state its table is in.
	f.signalBytes = float64(set1.bytes) / float64(max(1, set1.members))
	e.add("scale", tag+" Redis memory per signalling device", f.signalBytes, "B",
		fmt.Sprintf("slot 0's deadlines set (%s): MEMORY USAGE (every member) / its %d members", set1.encoding, set1.members))
	return burstDetection(e, events, replicas, tag, start, f)
}

// burstHeapPerDevice is the heap hbbench touches per burst device before the burst: the in-process
// broker reading, storing and serving its signal and its event and the reader keeping the event
// allocate about 4 KB while it is detected (at 10M, 3.9 GB until the last event, GODEBUG=gctrace=1).
const burstHeapPerDevice = 6 << 10

// prefaultHeap has the Go runtime take size bytes from the kernel and touch every page before the
// burst's signals, frees them for the burst's own allocations, and until the returned func runs
// collects only when the heap has filled them (GOGC off, a memory limit just above them). A heap
// growing into fresh memory during the burst paid a page fault for every 4 KiB, up to a whole core of
// this host at 300 MB/s (the scale burst at 10M), taken from the replicas under measurement; with
// collection as usual the scavenger would also hand the touched pages back while the heap is small.
func prefaultHeap(size int) (restore func()) {
	const chunk = 64 << 20
	hold := make([][]byte, 0, size/chunk+1)
	for left := size; left > 0; left -= chunk {
		b := make([]byte, min(chunk, left))
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		hold = append(hold, b)
	}
	runtime.KeepAlive(hold)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	// Room for the heap to fill the touched pages, collected when it has; below 95% of it the
	// scavenger hands nothing back.
	limit := debug.SetMemoryLimit(int64(ms.HeapAlloc) + int64(size)*11/10 + 256<<20)
	percent := debug.SetGCPercent(-1)
	return func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	}
}

// burstDetection waits for the burst's interrupted events, its signals written from start on, and reports
// their lateness and, from the first deadline on, who spent the CPU meanwhile.
func burstDetection(e *env, events *interruptedCollector, replicas []*testenv.Heartbeatd, tag string, start time.Time, f *scaleFigures) error {
	window := e.opts.ScaleWindow
	if !loop.Sleep(e.ctx, time.Until(start.Add(3*window))) {
		return e.ctx.Err()
	}
	if err := e.redis.client.ConfigResetStat(e.ctx).Err(); err != nil {
		return err
	}
	cpu0, err := sampleCPU(e, replicas)
	if err != nil {
		return err
	}
	within := time.Until(start.Add(4*window + 2*time.Minute))
	if err := events.wait(e.ctx, within); err != nil {
		return err
	}
	cpu1, err := sampleCPU(e, replicas) // before the decode: it is hbbench's, after the burst
	if err != nil {
		return err
	}
	if f.late, err = events.lateness(within); err != nil {
		return err
	}
	top, err := topCommands(e)
	if err != nil {
		return err
	}
	note := fmt.Sprintf("%d deadlines over %s among the fleet (spread %.1fs); events topic receipt − deadline; from the first "+
		"deadline to the last event: %s; Redis's costliest: %s", f.burst, window, f.late.spread.Seconds(), cpu1.since(cpu0), top)
	e.add("scale", tag+" burst lateness p50", benchrig.Ms(f.late.p50), "ms", note)
	e.add("scale", tag+" burst lateness p99", benchrig.Ms(f.late.p99), "ms", "")
	e.add("scale", tag+" burst lateness max", benchrig.Ms(f.late.max), "ms", "")
	e.add("scale", tag+" burst raised p99", benchrig.Ms(f.late.raisedP99), "ms", "the event's at − deadline")
	means := make([]string, len(f.late.byTwentieth))
	for i, m := range f.late.byTwentieth {
		means[i] = strconv.FormatInt(m.Milliseconds(), 10)
	}
	e.add("scale", tag+" burst lateness, worst twentieth", benchrig.Ms(slices.Max(f.late.byTwentieth)), "ms",
		"the mean lateness of the deadlines in each twentieth of the spread, in order (ms): "+strings.Join(means, " "))
	e.add("scale", tag+" burst early events", float64(f.late.early), "count", "received before their deadline; must be 0")
	return nil
}

// slotSetSize is one slot's deadlines set: its members, MEMORY USAGE (every member counted) and encoding.
type slotSetSize struct {
	members, bytes int64
	encoding       string
}

// slotSet sizes slot 0's deadlines set, where a signalling device's bytes go.
func slotSet(e *env) (slotSetSize, error) {
	key := deadline.NewKeyspace("").Deadlines(0)
	var s slotSetSize
	var err error
	if s.members, err = e.redis.client.ZCard(e.ctx, key).Result(); err != nil {
		return s, err
	}
	if s.bytes, err = e.redis.client.MemoryUsage(e.ctx, key, 0).Result(); err != nil {
		return s, err
	}
	s.encoding, err = e.redis.client.ObjectEncoding(e.ctx, key).Result()
	return s, err
}

// writePaced writes a signal of devices id(0…n-1), record i stamped start + i·window/n and written once
// that time has come, so that their deadlines spread evenly over window.
func writePaced(ctx context.Context, k *testenv.Kafka, n int, window time.Duration, id func(int) string, value []byte) error {
	cl, err := kgo.NewClient(append(k.ClientOpts(), kgo.DefaultProduceTopic(signalTopic), kgo.ProducerLinger(time.Millisecond))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	var once sync.Once
	var failed error
	onDone := func(_ *kgo.Record, err error) {
		if err != nil {
			once.Do(func() { failed = err })
		}
	}
	start := time.Now()
	for next := 0; next < n; {
		if !loop.Sleep(ctx, 5*time.Millisecond) {
			return ctx.Err()
		}
		now := time.Now()
		for ; next < n; next++ {
			at := start.Add(time.Duration(next) * window / time.Duration(n))
			if at.After(now) {
				break
			}
			cl.Produce(ctx, &kgo.Record{Key: []byte(id(next)), Value: value, Timestamp: at}, onDone)
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	if failed != nil {
		return fmt.Errorf("hbbench: write the burst's signals: %w", failed)
	}
	return nil
}

// cpuSample is the CPU spent so far by Redis, by each replica and by hbbench itself (kfake, the event
// reader, the signal writer).
type cpuSample struct {
	at          time.Time
	redis, self time.Duration
	replicas    []time.Duration
}

func sampleCPU(e *env, replicas []*testenv.Heartbeatd) (cpuSample, error) {
	s := cpuSample{at: time.Now(), self: selfCPU()}
	var err error
	if s.redis, err = redisCPU(e.ctx, e.redis.client); err != nil {
		return s, err
	}
	for _, hb := range replicas {
		cpu, err := procCPU(hb.PID())
		if err != nil {
			return s, err
		}
		s.replicas = append(s.replicas, cpu)
	}
	return s, nil
}

// since is the cores each spent from before to s.
func (s cpuSample) since(before cpuSample) string {
	wall := s.at.Sub(before.at).Seconds()
	cores := func(a, b time.Duration) string { return fmt.Sprintf("%.2f", (a-b).Seconds()/wall) }
	var replicas []string
	for i := range s.replicas {
		replicas = append(replicas, cores(s.replicas[i], before.replicas[i]))
	}
	return fmt.Sprintf("Redis %s, replicas %s, hbbench %s cores over %.1fs", cores(s.redis, before.redis),
		strings.Join(replicas, " + "), cores(s.self, before.self), wall)
}

// appliedSignals is the Kafka signals the replicas applied so far, together.
func appliedSignals(replicas []*testenv.Heartbeatd) (int, error) {
	var sum float64
	for _, hb := range replicas {
		v, _, err := hb.Metric(`heartbeatd_signals_total{result="applied",source="kafka"}`)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return int(sum), nil
}

// awaitAppliedBy waits until the replicas applied n Kafka signals together.
func awaitAppliedBy(e *env, replicas []*testenv.Heartbeatd, n int) error {
	start := time.Now()
	for {
		applied, err := appliedSignals(replicas)
		if err != nil {
			return err
		}
		if applied >= n {
			return nil
		}
		if time.Since(start) > 5*time.Minute {
			return fmt.Errorf("hbbench: the replicas applied %d of %d signals after 5 minutes", applied, n)
		}
		if !loop.Sleep(e.ctx, 100*time.Millisecond) {
			return e.ctx.Err()
		}
	}
}

// interruptedCollector reads the events topic from its start and keeps, for each event that names an
// interrupted device prefix…, when it was received and its bytes. It decodes them only once the last
// arrived: decoding 100k events a second takes a quarter of a core (BenchmarkDecode), which would be
// taken from the replicas under measurement on a two-core host.
type interruptedCollector struct {
	cl       *kgo.Client
	cancel   context.CancelFunc
	done     chan struct{} // the reader returned
	complete chan struct{} // want events received
	want     int
	kind     []byte // the quoted kind every wanted event holds
	prefix   string

	mu       sync.Mutex
	received []receivedEvent
}

// receivedEvent is one event's bytes and when a poll returned it.
type receivedEvent struct {
	at    time.Time
	value []byte
}

func collectInterrupted(ctx context.Context, k *testenv.Kafka, prefix string, want int) (*interruptedCollector, error) {
	cl, err := kgo.NewClient(append(k.ClientOpts(), kgo.ConsumeTopics(benchrig.EventsTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	c := &interruptedCollector{cl: cl, cancel: cancel, done: make(chan struct{}), complete: make(chan struct{}), want: want,
		kind: []byte(`"` + string(event.Interrupted) + `"`), prefix: prefix, received: make([]receivedEvent, 0, want)}
	go func() {
		defer close(c.done)
		for ctx.Err() == nil {
			fetches := cl.PollFetches(ctx)
			c.add(time.Now(), fetches)
		}
	}()
	return c, nil
}

// add keeps the records of one poll, received at, that may be wanted events: the decode after the last
// one tells.
func (c *interruptedCollector) add(at time.Time, fetches kgo.Fetches) {
	c.mu.Lock()
	defer c.mu.Unlock()
	before := len(c.received)
	fetches.EachRecord(func(r *kgo.Record) {
		if bytes.Contains(r.Value, c.kind) && bytes.Contains(r.Value, []byte(c.prefix)) {
			c.received = append(c.received, receivedEvent{at: at, value: r.Value})
		}
	})
	if before < c.want && len(c.received) >= c.want {
		close(c.complete)
	}
}

// wait waits up to within for the wanted events (lateness then says whether they came).
func (c *interruptedCollector) wait(ctx context.Context, within time.Duration) error {
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-c.complete:
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	return nil
}

// lateness decodes the events received so far and returns the wanted ones' lateness; within is what
// wait was given, for the error when too few came.
func (c *interruptedCollector) lateness(within time.Duration) (burstLateness, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out burstLateness
	var first, last time.Time // deadlines
	late := make([]time.Duration, 0, len(c.received))
	raised := make([]time.Duration, 0, len(c.received))
	deadlines := make([]time.Time, 0, len(c.received))
	undecoded := 0
	for _, r := range c.received {
		ev, err := event.Decode(r.value)
		if err != nil {
			undecoded++
			continue
		}
		if ev.Kind != event.Interrupted || !strings.HasPrefix(ev.DeviceID, c.prefix) {
			continue
		}
		if r.at.Before(ev.Deadline) {
			out.early++
		}
		if first.IsZero() || ev.Deadline.Before(first) {
			first = ev.Deadline
		}
		if ev.Deadline.After(last) {
			last = ev.Deadline
		}
		late = append(late, r.at.Sub(ev.Deadline))
		raised = append(raised, ev.At.Sub(ev.Deadline))
		deadlines = append(deadlines, ev.Deadline)
	}
	if len(late) < c.want {
		return burstLateness{}, fmt.Errorf("hbbench: %d of %d burst devices reported within %s (%d events undecoded)",
			len(late), c.want, within.Round(time.Second), undecoded)
	}
	out.byTwentieth = twentiethMeans(late, deadlines, first, last)
	slices.Sort(late)
	slices.Sort(raised)
	out.p50, out.p99, out.max = benchrig.Quantile(late, 0.5), benchrig.Quantile(late, 0.99), late[len(late)-1]
	out.raisedP99, out.spread = benchrig.Quantile(raised, 0.99), last.Sub(first)
	return out, nil
}

// twentiethMeans is the mean of late (each event's lateness, its deadline in deadlines) over each
// twentieth of the deadlines' spread from first to last.
func twentiethMeans(late []time.Duration, deadlines []time.Time, first, last time.Time) []time.Duration {
	sums := make([]time.Duration, burstTwentieths)
	counts := make([]int, burstTwentieths)
	spread := last.Sub(first)
	for i, d := range deadlines {
		k := burstTwentieths - 1
		if spread > 0 {
			k = min(k, int(int64(burstTwentieths)*int64(d.Sub(first))/int64(spread)))
		}
		sums[k] += late[i]
		counts[k]++
	}
	for k := range sums {
		if counts[k] > 0 {
			sums[k] /= time.Duration(counts[k])
		}
	}
	return sums
}

// stop ends the reader and closes its client.
func (c *interruptedCollector) stop() {
	c.cancel()
	<-c.done
	c.cl.Close()
}
