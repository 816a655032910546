package main

// The scenarios that run the real heartbeatd binary: rss and daemon-cpu.

import (
	"bufio"
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// rssScenario runs the real heartbeatd binary as a subprocess against hbbench's redis-server and a kfake
// broker, feeds -devices devices through its Kafka ingest and reads VmRSS/VmHWM from /proc/pid/status:
// idle (healthy, nothing ingested) and once Redis holds every device. Device state lives in Redis, so
// heartbeatd's own memory should not grow with the fleet; this scenario checks that it does not.
func rssScenario(e *env) (err error) {
	n := e.opts.Devices
	k, err := benchrig.Kafka(4, signalTopic, benchrig.EventsTopic, "heartbeat.deadletter")
	if err != nil {
		return err
	}
	defer k.Close()
	hb, err := launchOnKafka(e, k, e.opts.HeartbeatdBin, "hbbench-rss")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\nheartbeatd log:\n%s", err, hb.LogTail())
		}
		hb.Close()
	}()
	idle, err := procStatus(hb.PID(), "VmRSS")
	if err != nil {
		return err
	}

	store, err := deadline.New(e.redis.client, deadline.Options{Slots: config.DefaultSlots, Timeout: benchTimeout})
	if err != nil {
		return err
	}
	start := time.Now()
	if err := writeSignals(e.ctx, k.Addrs, n, deviceID); err != nil {
		return err
	}
	var peak int64
	for {
		st, err := procStatus(hb.PID(), "VmRSS")
		if err != nil {
			return err
		}
		peak = max(peak, st["VmRSS"])
		c, err := store.Count(e.ctx)
		if err != nil {
			return err
		}
		if c.Online >= int64(n) {
			break
		}
		if time.Since(start) > 5*time.Minute {
			return fmt.Errorf("hbbench: heartbeatd stored %d of %d devices after 5 minutes", c.Online, n)
		}
		if !loop.Sleep(e.ctx, 50*time.Millisecond) {
			return e.ctx.Err()
		}
	}
	took := time.Since(start)
	after, err := procStatus(hb.PID(), "VmRSS", "VmHWM")
	if err != nil {
		return err
	}
	note := fmt.Sprintf("real binary (subprocess), %d devices in via Kafka ingest", n)
	e.add("rss", "heartbeatd VmRSS idle", float64(idle["VmRSS"])/1024, "MiB", "healthy, nothing ingested")
	e.add("rss", "heartbeatd VmRSS with devices", float64(after["VmRSS"])/1024, "MiB", note)
	e.add("rss", "heartbeatd VmRSS peak sampled", float64(max(peak, after["VmRSS"]))/1024, "MiB", "every 50ms while ingesting")
	e.add("rss", "heartbeatd VmHWM", float64(after["VmHWM"])/1024, "MiB", "kernel high-water mark")
	e.add("rss", "RSS growth per device", float64(after["VmRSS"]-idle["VmRSS"])*1024/float64(n), "B", "VmRSS with devices − idle")
	e.add("rss", "ingest rate into the binary", float64(n)/took.Seconds(), "signals/s", "write to Kafka → all in Redis")
	return nil
}

// launchOnKafka starts the heartbeatd binary bin ("" builds ./cmd/heartbeatd; HB_HEARTBEATD_BIN names
// a prebuilt one) on hbbench's Redis, ingesting k's signal topic as consumer group, and waits until it
// is ready.
func launchOnKafka(e *env, k *testenv.Kafka, bin, group string) (*testenv.Heartbeatd, error) {
	return launchOnKafkaWith(e, k, bin, group, `
  default: {timeout: 10m}
  gateway: {timeout: 10m}`)
}

// launchOnKafkaWith is launchOnKafka with types, the YAML of the types section's entries.
func launchOnKafkaWith(e *env, k *testenv.Kafka, bin, group, types string) (*testenv.Heartbeatd, error) {
	brokers := strings.Join(k.Addrs, ",")
	cfg := fmt.Sprintf(`
redis: {addrs: [%q], slots: %d}
types:%s
ingest:
  mqtt: {enabled: false}
  kafka: {enabled: true, brokers: [%q], topics: [%q], group_id: %s}
events:
  kafka: {brokers: [%q]}
log: {level: warn}
`, e.redis.Addr, config.DefaultSlots, types, brokers, signalTopic, group, brokers)
	hb, err := testenv.LaunchHeartbeatd(e.ctx, "", testenv.HeartbeatdOptions{Config: cfg, Binary: bin})
	if err != nil {
		return nil, fmt.Errorf("hbbench: %w (-heartbeatd names a prebuilt binary)", err)
	}
	if err := hb.AwaitReady(e.ctx, 30*time.Second); err != nil {
		err = fmt.Errorf("%w\nheartbeatd log:\n%s", err, hb.LogTail())
		hb.Close()
		return nil, err
	}
	return hb, nil
}

// procStatus reads fields of /proc/pid/status in kB (VmRSS, VmHWM).
func procStatus(pid int, fields ...string) (map[string]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || !slices.Contains(fields, k) {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("hbbench: %s: %q: %w", k, v, err)
		}
		out[k] = kb
	}
	return out, sc.Err()
}

// namedBinary is a heartbeatd binary a scenario runs, named "heartbeatd" or "baseline".
type namedBinary struct{ name, path string }

// binaries are the heartbeatd binaries a scenario with a same-run A/B runs: the baseline first when
// -heartbeatd-baseline names one.
func (e *env) binaries() []namedBinary {
	bins := []namedBinary{{"heartbeatd", e.opts.HeartbeatdBin}}
	if e.opts.BaselineBin != "" {
		bins = append([]namedBinary{{"baseline", e.opts.BaselineBin}}, bins...)
	}
	return bins
}

// daemonCPUScenario runs the real binary on hbbench's redis-server and a kfake broker and reads the CPU
// it spends per million signals applied through its Kafka ingest (utime + stime from /proc/pid/stat,
// from the first signal written until it counts them applied), and Redis's command time per signal, in
// the steady state. Three untyped passes in a periodic order over the same fleet come first, the third
// measured (the headline: signals carry neither type nor time, as the common heartbeat does); then one
// pass of each other case (cpuCases). With -heartbeatd-baseline the baseline binary runs the same load
// in alternating rounds, and the ratio is the same-run A/B.
func daemonCPUScenario(e *env) error {
	bins := e.binaries()
	const rounds = 2
	passes := map[string]map[string][]daemonPass{} // binary → case → its pass in each round
	shifts := map[string][]time.Duration{}
	for _, b := range bins {
		passes[b.name] = map[string][]daemonPass{}
	}
	for r := range rounds {
		for _, b := range bins {
			got, shifted, err := daemonCPURound(e, b.path, fmt.Sprintf("r%d-%s-", r, b.name))
			if err != nil {
				return fmt.Errorf("hbbench: daemon-cpu %s: %w", b.name, err)
			}
			for c, m := range got {
				passes[b.name][c] = append(passes[b.name][c], m)
			}
			shifts[b.name] = append(shifts[b.name], shifted...)
		}
	}
	signals := float64(e.opts.Signals)
	// per is one figure of a binary's case, a value per round.
	per := func(bin, c string, figure func(daemonPass) float64) []float64 {
		out := make([]float64, 0, rounds)
		for _, p := range passes[bin][c] {
			out = append(out, figure(p))
		}
		return out
	}
	cpuPerM := func(p daemonPass) float64 { return p.cpu.Seconds() * 1e6 / signals }
	redisUs := func(p daemonPass) float64 { return float64(p.commands.Nanoseconds()) / 1000 / signals }
	redisCPUUs := func(p daemonPass) float64 { return float64(p.redisCPU.Nanoseconds()) / 1000 / signals }
	perBatch := func(p daemonPass) float64 { return signals / max(p.batches, 1) }
	mean := meanOf
	for _, b := range bins {
		for _, c := range cpuCases {
			metric, what := b.name+" CPU per million signals", "untyped signals"
			if c.name != "" {
				metric += ", " + c.name
				what = c.name + " signals"
			}
			cpu := per(b.name, c.name, cpuPerM)
			note := fmt.Sprintf("%d %s per round via Kafka; rounds %s", e.opts.Signals, what, joinFloats(cpu))
			if b.name != "baseline" && e.opts.BaselineBin != "" {
				note += fmt.Sprintf("; %.2fx baseline", mean(cpu)/mean(per("baseline", c.name, cpuPerM)))
			}
			e.add("daemon-cpu", metric, mean(cpu), "core-s", note)
			named := cmp.Or(c.name, "untyped periodic")
			redis := per(b.name, c.name, redisUs)
			e.add("daemon-cpu", b.name+" Redis time per signal, "+named, mean(redis), "µs/signal",
				"INFO commandstats over the pass; rounds "+joinFloats(redis))
			batch := per(b.name, c.name, perBatch)
			e.add("daemon-cpu", b.name+" signals per deadline write, "+named, mean(batch), "signals",
				"signals of the pass ÷ "+batchesMetric+"; rounds "+joinFloats(batch))
			if c.paced {
				wrote := per(b.name, c.name, func(p daemonPass) float64 { return signals / p.wrote.Seconds() })
				e.add("daemon-cpu", b.name+" rate written, "+named, mean(wrote), "signals/s",
					fmt.Sprintf("paced at %d/s; rounds %s", e.opts.CPURate, joinFloats(wrote)))
				rate := per(b.name, c.name, func(p daemonPass) float64 { return signals / p.took.Seconds() })
				e.add("daemon-cpu", b.name+" rate applied, "+named, mean(rate), "signals/s",
					fmt.Sprintf("until all were applied, read every 250ms; rounds %s", joinFloats(rate)))
				peer := per(b.name, peerCase, redisUs)
				e.add("daemon-cpu", b.name+" keyspace peer Redis time per reset, kept up", mean(peer), "µs/reset",
					fmt.Sprintf("SET PX at %d/s beside this binary; rounds %s; the kept-up pass %.2fx", e.opts.CPURate, joinFloats(peer), mean(redis)/mean(peer)))
				// Command time leaves out reading, parsing and answering each command, which a command per
				// device pays and a batch shares, and counts the time Redis waits for a CPU inside one,
				// which the kept-up pass's neighbours (the broker, the binary) cause and the peer's do not.
				ours, peerCPU := per(b.name, c.name, redisCPUUs), per(b.name, peerCase, redisCPUUs)
				e.add("daemon-cpu", b.name+" Redis CPU per signal, "+named, mean(ours), "µs/signal",
					fmt.Sprintf("used_cpu_user+sys over the pass; rounds %s; last round's costliest: %s", joinFloats(ours), passes[b.name][c.name][rounds-1].top))
				e.add("daemon-cpu", b.name+" keyspace peer Redis CPU per reset, kept up", mean(peerCPU), "µs/reset",
					fmt.Sprintf("used_cpu_user+sys, SET PX at %d/s; rounds %s; the kept-up pass %.2fx", e.opts.CPURate, joinFloats(peerCPU), mean(ours)/mean(peerCPU)))
			}
		}
		sh := shifts[b.name]
		slices.Sort(sh)
		e.add("daemon-cpu", b.name+" deadline shift p50", benchrig.Ms(benchrig.Quantile(sh, 0.5)), "ms",
			fmt.Sprintf("stored deadline − (record timestamp + timeout), %d sampled devices of the first pass (a backlog)", len(sh)))
		e.add("daemon-cpu", b.name+" deadline shift p99", benchrig.Ms(benchrig.Quantile(sh, 0.99)), "ms", "")
	}
	return nil
}

// cpuCases are the passes daemonCPURound measures, in the order it runs them: the third untyped
// periodic pass ("", the headline), then typed signals, a pass written at a pace the binary keeps up
// with (the others are backlogs it drains), and the random order. Typed signals name the type the
// devices already have, so they change nothing but the way in. The periodic passes come first: a pass
// in the fleet's first order after a random one would be random to Redis too.
var cpuCases = []struct {
	name   string
	typed  bool
	random bool
	paced  bool // written at -cpu-rate signals a second; else as fast as the broker takes them
}{
	{"", false, false, false},
	{"typed periodic", true, false, false},
	{"untyped periodic, kept up", false, false, true},
	{"untyped random", false, true, false},
	{"typed random", true, true, false},
}

// daemonPass is what one measured pass cost the binary (its CPU) and Redis (its command time), and
// how many deadline writes (batches) carried its signals.
type daemonPass struct {
	cpu, commands time.Duration
	redisCPU      time.Duration // Redis's own user + system CPU over the pass
	top           string        // Redis's three costliest commands over the pass (topCommands)
	batches       float64
	took          time.Duration // from its first signal written until every one was applied
	wrote         time.Duration // from its first signal written until the last one was
}

func joinFloats(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(s, ", ")
}

// daemonCPURound launches bin on a flushed Redis and a fresh broker, writes -signals untyped signals for
// devices prefix0… three times, then one pass of each other case of cpuCases, and returns what the
// process and Redis spent on each measured pass.
func daemonCPURound(e *env, bin, prefix string) (got map[string]daemonPass, shifts []time.Duration, err error) {
	if err := e.redis.flush(e.ctx); err != nil {
		return nil, nil, err
	}
	k, err := benchrig.Kafka(e.opts.CPUPartitions, signalTopic, benchrig.EventsTopic, "heartbeat.deadletter")
	if err != nil {
		return nil, nil, err
	}
	defer k.Close()
	hb, err := launchOnKafka(e, k, bin, "hbbench-cpu")
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\nheartbeatd log:\n%s", err, hb.LogTail())
		}
		hb.Close()
	}()
	n := e.opts.Signals
	id := func(i int) string { return prefix + strconv.Itoa(i) }
	// Every step-th device of the first pass: when its signal was written (its record's timestamp).
	step := max(1, n/1000)
	written := map[int]time.Time{}
	firstPass := true
	untyped := func(i int) []byte {
		if firstPass && i%step == 0 {
			written[i] = time.Now()
		}
		return []byte("{}")
	}
	typed := func(int) []byte { return []byte(`{"type":"default"}`) }
	got = map[string]daemonPass{}
	applied := 0
	// measure writes one pass and reads the process's CPU and Redis's command time until it is applied.
	measure := func(order func(int) string, payload func(int) []byte, rate int) (daemonPass, error) {
		if err := e.redis.client.ConfigResetStat(e.ctx).Err(); err != nil {
			return daemonPass{}, err
		}
		before, err := binaryCounters(hb)
		if err != nil {
			return daemonPass{}, err
		}
		redis0, err := redisCPU(e.ctx, e.redis.client)
		if err != nil {
			return daemonPass{}, err
		}
		start := time.Now()
		if err := writeSignalsAs(e.ctx, k.Addrs, n, order, payload, rate); err != nil {
			return daemonPass{}, err
		}
		wrote := time.Since(start)
		applied += n
		if err := awaitApplied(e, hb, applied); err != nil {
			return daemonPass{}, err
		}
		took := time.Since(start)
		after, err := binaryCounters(hb)
		if err != nil {
			return daemonPass{}, err
		}
		redis1, err := redisCPU(e.ctx, e.redis.client)
		if err != nil {
			return daemonPass{}, err
		}
		commands, err := commandTime(e.ctx, e.redis.client)
		if err != nil {
			return daemonPass{}, err
		}
		top, err := topCommands(e)
		return daemonPass{cpu: after.cpu - before.cpu, commands: commands, redisCPU: redis1 - redis0, top: top,
			batches: after.batches - before.batches, took: took, wrote: wrote}, err
	}
	// The first pass makes the fleet known to Redis, the second to the replica; the third is the
	// steady state.
	for pass := 1; pass <= 3; pass++ {
		if got[""], err = measure(id, untyped, 0); err != nil {
			return nil, nil, err
		}
		if pass == 1 {
			firstPass = false
			if shifts, err = deadlineShifts(e, id, written); err != nil {
				return nil, nil, err
			}
		}
	}
	for _, c := range cpuCases[1:] {
		order, payload := id, untyped
		if c.random {
			perm := rand.Perm(n)
			order = func(i int) string { return id(perm[i]) }
		}
		if c.typed {
			payload = typed
		}
		rate := 0
		if c.paced {
			rate = e.opts.CPURate
		}
		if got[c.name], err = measure(order, payload, rate); err != nil {
			return nil, nil, err
		}
	}
	if got[peerCase], err = keyspacePeerPass(e, n, id); err != nil {
		return nil, nil, err
	}
	return got, shifts, nil
}

// peerCase names the keyspace peer's pass among a round's passes.
const peerCase = "keyspace peer"

// keyspacePeerPass is the keyspace-notification design's cost beside the kept-up pass: `SET key PX` per
// device at -cpu-rate, a millisecond's worth per pipeline, on the same Redis; its keys exist already
// (an unmeasured pass first), as a live fleet's do. Only commands and redisCPU are set.
func keyspacePeerPass(e *env, n int, id func(int) string) (daemonPass, error) {
	pass := func() error {
		per, start := max(e.opts.CPURate/1000, 1), time.Now()
		for i := 0; i < n; i += per {
			if !loop.Sleep(e.ctx, time.Until(start.Add(time.Duration(i)*time.Second/time.Duration(e.opts.CPURate)))) {
				return e.ctx.Err()
			}
			pipe := e.redis.client.Pipeline()
			for j := i; j < min(i+per, n); j++ {
				pipe.Set(e.ctx, "ks:"+id(j), "1", 10*time.Minute)
			}
			if _, err := pipe.Exec(e.ctx); err != nil {
				return fmt.Errorf("hbbench: keyspace peer: %w", err)
			}
		}
		return nil
	}
	if err := pass(); err != nil {
		return daemonPass{}, err
	}
	if err := e.redis.client.ConfigResetStat(e.ctx).Err(); err != nil {
		return daemonPass{}, err
	}
	cpu0, err := redisCPU(e.ctx, e.redis.client)
	if err != nil {
		return daemonPass{}, err
	}
	if err := pass(); err != nil {
		return daemonPass{}, err
	}
	cpu1, err := redisCPU(e.ctx, e.redis.client)
	if err != nil {
		return daemonPass{}, err
	}
	commands, err := commandTime(e.ctx, e.redis.client)
	return daemonPass{commands: commands, redisCPU: cpu1 - cpu0}, err
}

// deadlineShifts is, for each device written at written[i], how far the deadline heartbeatd stored lies
// past the signal's record timestamp + the 10-minute timeout: the consumer's delay when the deadline runs
// from the time the signal was processed, ≈ 0 when it runs from the record's timestamp (docs/signals.md).
func deadlineShifts(e *env, id func(int) string, written map[int]time.Time) ([]time.Duration, error) {
	store, err := deadline.New(e.redis.client, deadline.Options{Slots: config.DefaultSlots, Timeout: benchTimeout})
	if err != nil {
		return nil, err
	}
	out := make([]time.Duration, 0, len(written))
	for i, at := range written {
		d, found, err := store.Device(e.ctx, id(i))
		if err != nil {
			return nil, err
		}
		if !found || d.Deadline.IsZero() {
			return nil, fmt.Errorf("device %s has no deadline", id(i))
		}
		// The record's timestamp has millisecond precision.
		out = append(out, d.Deadline.Add(-10*time.Minute).Sub(at.Truncate(time.Millisecond)))
	}
	slices.Sort(out)
	return out, nil
}

// batchesMetric counts the binary's deadline writes, one per batch.
const batchesMetric = "heartbeatd_refresh_duration_seconds_count"

// binaryCounters reads what the binary has spent so far: its CPU, and its deadline writes
// (batchesMetric); a pass costs the difference. commands is left to Redis's own counters.
func binaryCounters(hb *testenv.Heartbeatd) (daemonPass, error) {
	cpu, err := procCPU(hb.PID())
	if err != nil {
		return daemonPass{}, err
	}
	batches, found, err := hb.Metric(batchesMetric)
	if err == nil && !found {
		err = fmt.Errorf("hbbench: heartbeatd reports no %s", batchesMetric)
	}
	return daemonPass{cpu: cpu, batches: batches}, err
}

// awaitApplied waits until hb's heartbeatd_signals_total{result="applied",source="kafka"} reaches n.
func awaitApplied(e *env, hb *testenv.Heartbeatd, n int) error {
	start := time.Now()
	for {
		applied, _, err := hb.Metric(`heartbeatd_signals_total{result="applied",source="kafka"}`)
		if err != nil {
			return err
		}
		if applied >= float64(n) {
			return nil
		}
		if time.Since(start) > 5*time.Minute {
			return fmt.Errorf("heartbeatd applied %.0f of %d signals after 5 minutes", applied, n)
		}
		// Seldom: each scrape costs the measured process CPU of its own.
		if !loop.Sleep(e.ctx, 250*time.Millisecond) {
			return e.ctx.Err()
		}
	}
}

// procCPU is a process's user + system CPU from /proc/pid/stat (fields 14 and 15, in clock ticks of
// 1/100 s on Linux).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after it follow its closing parenthesis.
	rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, fmt.Errorf("hbbench: /proc/%d/stat: %q", pid, b)
	}
	var ticks int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("hbbench: /proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}
