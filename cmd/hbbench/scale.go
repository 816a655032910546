package main

// The scale scenario: a fleet of expected devices built through the real binary's import, at each of
// -scale-sizes, printed beside the first size as ratios (docs/scaling.md).

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

func init() { register("scale", scaleScenario) }

// scaleRowsPerRequest bounds one import request (≈ 50 B a row, well under the import's 256 MiB).
const scaleRowsPerRequest = 2_000_000

// scaleTypes are the fleet's meters (2 h, as a large fleet of meters) and the burst's devices, whose
// timeout (three bursts' windows) outlasts their import, so detection is measured after it, not beside it.
func scaleTypes(window time.Duration) string {
	return fmt.Sprintf(`
  default: {timeout: 2h}
  burst: {timeout: %s, repeat_every: 0s}`, 3*window)
}

// scaleFigures is what one size measured.
type scaleFigures struct {
	devices      int
	importRate   float64 // rows/s
	bytesPer     float64 // Redis used_memory growth per expected device
	idleCores    float64 // Redis used_cpu_user+sys over the idle interval, in cores
	topCommands  string
	burst        int
	lateP99      float64 // ms, the binary's detection_lateness_seconds histogram
	statsMs      float64 // GET /v1/stats
	listMs       float64 // GET /v1/devices?state=interrupted&limit=100
	pageMs       float64 // GET /
	importedRows int
}

// scaleScenario runs scaleSize for each of -scale-sizes on a flushed Redis, then adds each larger
// size's figures as ratios to the first's.
func scaleScenario(e *env) error {
	var all []scaleFigures
	for i, n := range e.opts.ScaleSizes {
		if i > 0 {
			if err := e.redis.flush(e.ctx); err != nil {
				return err
			}
		}
		f, err := scaleSize(e, n)
		if err != nil {
			return fmt.Errorf("%d devices: %w", n, err)
		}
		all = append(all, f)
	}
	base := all[0]
	for _, f := range all[1:] {
		note := fmt.Sprintf("%d against %d devices", f.devices, base.devices)
		ratio := func(metric string, a, b float64) { e.add("scale", metric, a/b, "×", note) }
		ratio("import time ratio", float64(f.devices)/f.importRate, float64(base.devices)/base.importRate)
		ratio("memory ratio", f.bytesPer*float64(f.devices), base.bytesPer*float64(base.devices))
		ratio("idle Redis CPU ratio", f.idleCores, base.idleCores)
		ratio("idle Redis CPU per device ratio", f.idleCores/float64(f.devices), base.idleCores/float64(base.devices))
		ratio("lateness p99 ratio", f.lateP99, base.lateP99)
		ratio("GET /v1/stats ratio", f.statsMs, base.statsMs)
		ratio("devices listing ratio", f.listMs, base.listMs)
	}
	return nil
}

// scaleSize starts the binary on hbbench's Redis, imports n expected devices over POST
// /v1/devices:import, then measures Redis memory per device, Redis's CPU over -scale-idle with nothing
// signalling, the API's latency, and the lateness of a burst of deadlines among them.
func scaleSize(e *env, n int) (f scaleFigures, err error) {
	f.devices = n
	k, err := benchrig.Kafka(4, signalTopic, benchrig.EventsTopic, "heartbeat.deadletter")
	if err != nil {
		return f, err
	}
	defer k.Close()
	hb, err := launchOnKafkaWith(e, k, e.opts.HeartbeatdBin, "hbbench-scale", scaleTypes(e.opts.ScaleWindow))
	if err != nil {
		return f, err
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\nheartbeatd log:\n%s", err, hb.LogTail())
		}
		hb.Close()
	}()
	tag := fmt.Sprintf("%dk", n/1000)
	before, err := e.redis.usedMemory(e.ctx)
	if err != nil {
		return f, err
	}
	start := time.Now()
	for from := 0; from < n; from += scaleRowsPerRequest {
		if err := importRows(e.ctx, hb, from, min(n, from+scaleRowsPerRequest), "meter", "default"); err != nil {
			return f, err
		}
	}
	f.importRate = float64(n) / time.Since(start).Seconds()
	after, err := e.redis.usedMemory(e.ctx)
	if err != nil {
		return f, err
	}
	f.bytesPer = float64(after-before) / float64(n)
	e.add("scale", tag+" import rate", f.importRate, "rows/s", fmt.Sprintf("%d rows over POST /v1/devices:import, real binary", n))
	e.add("scale", tag+" Redis memory per device", f.bytesPer, "B", "used_memory growth / expected devices")

	if f.idleCores, f.topCommands, err = idleRedis(e); err != nil {
		return f, err
	}
	e.add("scale", tag+" idle Redis CPU", f.idleCores, "cores", fmt.Sprintf("used_cpu_user+sys over %s, nothing signalling; top: %s", e.opts.ScaleIdle, f.topCommands))

	for _, c := range []struct {
		path string
		into *float64
	}{{"/v1/stats", &f.statsMs}, {"/v1/devices?state=interrupted&limit=100", &f.listMs}, {"/", &f.pageMs}} {
		if *c.into, err = medianGet(hb, c.path); err != nil {
			return f, err
		}
		e.add("scale", tag+" GET "+c.path, *c.into, "ms", "median of 5")
	}

	f.burst = min(100_000, max(1000, n/10))
	if err := importPaced(e.ctx, hb, f.burst, e.opts.ScaleWindow, "burst", "burst"); err != nil {
		return f, err
	}
	if f.lateP99, err = awaitLateness(e.ctx, hb, f.burst); err != nil {
		return f, err
	}
	e.add("scale", tag+" burst lateness p99", f.lateP99, "ms", fmt.Sprintf("%d deadlines over %s among the fleet; the binary's histogram bucket", f.burst, e.opts.ScaleWindow))
	return f, nil
}

// importPaced imports n devices in ten equal requests, one every window/10, so their deadlines spread
// over the window (-scale-window).
func importPaced(ctx context.Context, hb *testenv.Heartbeatd, n int, window time.Duration, prefix, typ string) error {
	start := time.Now()
	for step := range 10 {
		if !loop.Sleep(ctx, time.Until(start.Add(time.Duration(step)*window/10))) {
			return ctx.Err()
		}
		if err := importRows(ctx, hb, step*n/10, (step+1)*n/10, prefix, typ); err != nil {
			return err
		}
	}
	return nil
}

// importRows posts devices prefix-from … prefix-(to-1) of typ as one NDJSON stream.
func importRows(ctx context.Context, hb *testenv.Heartbeatd, from, to int, prefix, typ string) error {
	pr, pw := io.Pipe()
	go func() {
		w := bufio.NewWriterSize(pw, 1<<16)
		for i := from; i < to; i++ {
			fmt.Fprintf(w, `{"device_id":"%s-%09d","device_type":"%s"}`+"\n", prefix, i, typ)
		}
		pw.CloseWithError(w.Flush())
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hb.HTTP+"/v1/devices:import", pr)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("hbbench: import: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), fmt.Sprintf(`"imported":%d,`, to-from)) {
		return fmt.Errorf("hbbench: import of %d rows: %d %s", to-from, resp.StatusCode, body)
	}
	return nil
}

// idleRedis is Redis's CPU (cores) over -scale-idle and its three costliest commands meanwhile.
func idleRedis(e *env) (float64, string, error) {
	if err := e.redis.client.ConfigResetStat(e.ctx).Err(); err != nil {
		return 0, "", err
	}
	cpu0, err := redisCPU(e.ctx, e.redis.client)
	if err != nil {
		return 0, "", err
	}
	t0 := time.Now()
	if !loop.Sleep(e.ctx, e.opts.ScaleIdle) {
		return 0, "", e.ctx.Err()
	}
	cpu1, err := redisCPU(e.ctx, e.redis.client)
	if err != nil {
		return 0, "", err
	}
	wall := time.Since(t0)
	stats, err := testenv.ReadCommandStats(e.ctx, e.redis.client)
	if err != nil {
		return 0, "", err
	}
	names := slices.Collect(maps.Keys(stats))
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(stats[b].Usec, stats[a].Usec) })
	var top []string
	for _, name := range names[:min(3, len(names))] {
		top = append(top, fmt.Sprintf("%s %d calls %.2fs", name, stats[name].Calls, float64(stats[name].Usec)/1e6))
	}
	return (cpu1 - cpu0).Seconds() / wall.Seconds(), strings.Join(top, ", "), nil
}

// medianGet is the median time of five GETs of path, in ms.
func medianGet(hb *testenv.Heartbeatd, path string) (float64, error) {
	var took []time.Duration
	for range 5 {
		t0 := time.Now()
		code, body, err := hb.Get(path)
		if err != nil {
			return 0, err
		}
		if code != http.StatusOK {
			return 0, fmt.Errorf("hbbench: GET %s: %d %s", path, code, body)
		}
		took = append(took, time.Since(t0))
	}
	slices.Sort(took)
	return benchrig.Ms(took[2]), nil
}

// awaitLateness waits until the binary observed n detections and returns the upper bound (ms) of the
// histogram bucket holding their 99th percentile.
func awaitLateness(ctx context.Context, hb *testenv.Heartbeatd, n int) (float64, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		buckets, count, err := latenessHistogram(hb)
		if err != nil {
			return 0, err
		}
		if count >= float64(n) {
			for _, b := range buckets {
				if b.count >= 0.99*count {
					return b.le * 1000, nil
				}
			}
			return math.Inf(1), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("hbbench: %0.f of %d burst deadlines detected within 2 minutes", count, n)
		}
		if !loop.Sleep(ctx, 200*time.Millisecond) {
			return 0, ctx.Err()
		}
	}
}

type histogramBucket struct{ le, count float64 }

// latenessHistogram reads heartbeatd_detection_lateness_seconds's cumulative buckets and count.
func latenessHistogram(hb *testenv.Heartbeatd) ([]histogramBucket, float64, error) {
	code, body, err := hb.Get("/metrics")
	if err != nil || code != http.StatusOK {
		return nil, 0, fmt.Errorf("hbbench: GET /metrics: %d %w", code, err)
	}
	var buckets []histogramBucket
	var count float64
	for _, line := range strings.Split(body, "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		if le, ok := strings.CutPrefix(name, `heartbeatd_detection_lateness_seconds_bucket{le="`); ok {
			bound, _ := strconv.ParseFloat(strings.TrimSuffix(le, `"}`), 64)
			buckets = append(buckets, histogramBucket{bound, v})
		} else if name == "heartbeatd_detection_lateness_seconds_count" {
			count = v
		}
	}
	return buckets, count, nil
}
