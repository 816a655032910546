package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/config"
)

// daemonCPUScenario runs the real binary on hbbench's redis-server and a kfake broker and reads the CPU
// it spends per million signals applied through its Kafka ingest (utime + stime from /proc/pid/stat,
// from the first signal written until it counts them applied), in the steady state: the third pass
// over the same fleet. The signals carry neither type nor time, as
// the common heartbeat does. With -heartbeatd-baseline the baseline binary runs the same load in
// alternating rounds, and the ratio is the same-run A/B.
func daemonCPUScenario(e *env) error {
	bins := []struct{ name, path string }{{"heartbeatd", e.opts.HeartbeatdBin}}
	if e.opts.BaselineBin != "" {
		bins = append([]struct{ name, path string }{{"baseline", e.opts.BaselineBin}}, bins...)
	}
	const rounds = 2
	perM := map[string][]float64{}
	for r := range rounds {
		for _, b := range bins {
			cpu, err := daemonCPURound(e, b.path, fmt.Sprintf("r%d-%s-", r, b.name))
			if err != nil {
				return fmt.Errorf("hbbench: daemon-cpu %s: %w", b.name, err)
			}
			perM[b.name] = append(perM[b.name], cpu.Seconds()*1e6/float64(e.opts.Signals))
		}
	}
	mean := func(v []float64) float64 {
		var s float64
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	for _, b := range bins {
		note := fmt.Sprintf("%d untyped signals per round via Kafka; rounds %s", e.opts.Signals, joinFloats(perM[b.name]))
		if b.name != "baseline" && e.opts.BaselineBin != "" {
			note += fmt.Sprintf("; %.2fx baseline", mean(perM[b.name])/mean(perM["baseline"]))
		}
		e.add("daemon-cpu", b.name+" CPU per million signals", mean(perM[b.name]), "core-s", note)
	}
	return nil
}

func joinFloats(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(s, ", ")
}

// daemonCPURound launches bin on a flushed Redis and a fresh broker, writes -signals untyped signals for
// devices prefix0… three times and returns the CPU the process spent on the third pass.
func daemonCPURound(e *env, bin, prefix string) (cpu time.Duration, err error) {
	if err := e.redis.flush(e.ctx); err != nil {
		return 0, err
	}
	k, err := benchrig.Kafka(4, signalTopic, benchrig.EventsTopic, "heartbeat.deadletter")
	if err != nil {
		return 0, err
	}
	defer k.Close()
	cfg := fmt.Sprintf(`
redis: {addrs: [%q], slots: %d}
types:
  default: {timeout: 10m}
ingest:
  mqtt: {enabled: false}
  kafka: {enabled: true, brokers: [%q], topics: [%q], group_id: hbbench-cpu}
events:
  kafka: {brokers: [%q]}
log: {level: warn}
`, e.redis.Addr, config.DefaultSlots, strings.Join(k.Addrs, ","), signalTopic, strings.Join(k.Addrs, ","))
	hb, err := testenv.LaunchHeartbeatd(e.ctx, "", testenv.HeartbeatdOptions{Config: cfg, Binary: bin})
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\nheartbeatd log:\n%s", err, hb.LogTail())
		}
		hb.Close()
	}()
	if err := hb.AwaitReady(e.ctx, 30*time.Second); err != nil {
		return 0, err
	}
	n := e.opts.Signals
	id := func(i int) string { return prefix + strconv.Itoa(i) }
	untyped := func(int) []byte { return []byte("{}") }
	// The first pass makes the fleet known to Redis, the second to the replica; the third, measured, is
	// the steady state.
	for pass := 1; pass <= 3; pass++ {
		before, err := procCPU(hb.PID())
		if err != nil {
			return 0, err
		}
		if err := writeSignalsAs(e.ctx, k.Addrs, n, id, untyped); err != nil {
			return 0, err
		}
		if err := awaitApplied(e, hb, pass*n); err != nil {
			return 0, err
		}
		after, err := procCPU(hb.PID())
		if err != nil {
			return 0, err
		}
		cpu = after - before
	}
	return cpu, nil
}

// awaitApplied waits until hb's heartbeatd_signals_total{result="applied",source="kafka"} reaches n.
func awaitApplied(e *env, hb *testenv.Heartbeatd, n int) error {
	start := time.Now()
	for {
		_, body, err := hb.Get("/metrics")
		if err != nil {
			return err
		}
		applied := 0.0
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, `heartbeatd_signals_total{result="applied",source="kafka"} `); ok {
				if applied, err = strconv.ParseFloat(v, 64); err != nil {
					return fmt.Errorf("metrics %q: %w", line, err)
				}
			}
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
