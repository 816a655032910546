package main

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/config"
	"github.com/heartbeatd/heartbeatd/pkg/deadline"
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
	cfg := fmt.Sprintf(`
redis: {addrs: [%q], slots: %d}
types:
  default: {timeout: 10m}
  gateway: {timeout: 10m}
ingest:
  mqtt: {enabled: false}
  kafka: {enabled: true, brokers: [%q], topics: [%q], group_id: hbbench-rss}
events:
  kafka: {brokers: [%q]}
log: {level: warn}
`, e.redis.Addr, config.DefaultSlots, strings.Join(k.Addrs, ","), signalTopic, strings.Join(k.Addrs, ","))
	// Binary "" builds ./cmd/heartbeatd (HB_HEARTBEATD_BIN names a prebuilt one).
	hb, err := testenv.LaunchHeartbeatd(e.ctx, "", testenv.HeartbeatdOptions{Config: cfg, Binary: e.opts.HeartbeatdBin})
	if err != nil {
		return fmt.Errorf("hbbench: %w (-heartbeatd names a prebuilt binary)", err)
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\nheartbeatd log:\n%s", err, hb.LogTail())
		}
		hb.Close()
	}()
	if err := hb.AwaitReady(e.ctx, 30*time.Second); err != nil {
		return err
	}
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
