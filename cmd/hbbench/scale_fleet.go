package main

// The scale scenario's fleet: its import, and what it costs while nothing signals.

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// scaleFleet imports f.devices expected devices through hb and measures the import's rate and Redis's
// used_memory growth per device.
func scaleFleet(e *env, hb *testenv.Heartbeatd, tag string, f *scaleFigures) error {
	n := f.devices
	before, err := e.redis.usedMemory(e.ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	for from := 0; from < n; from += scaleRowsPerRequest {
		if err := importRows(e.ctx, hb, from, min(n, from+scaleRowsPerRequest), "meter", "default"); err != nil {
			return err
		}
	}
	f.importRate = float64(n) / time.Since(start).Seconds()
	after, err := e.redis.usedMemory(e.ctx)
	if err != nil {
		return err
	}
	f.bytesPer = float64(after-before) / float64(n)
	e.add("scale", tag+" import rate", f.importRate, "rows/s", fmt.Sprintf("%d rows over POST /v1/devices:import, real binary", n))
	e.add("scale", tag+" Redis memory per device", f.bytesPer, "B", "used_memory growth / expected devices")
	return nil
}

// scaleQuiet measures Redis's CPU while nothing signals, both replicas up, and the API's latency at hb.
func scaleQuiet(e *env, hb *testenv.Heartbeatd, tag string, f *scaleFigures) (err error) {
	if f.idleCores, f.topCommands, err = idleRedis(e); err != nil {
		return err
	}
	e.add("scale", tag+" idle Redis CPU", f.idleCores, "cores",
		fmt.Sprintf("%.3f: used_cpu_user+sys over %s, 2 replicas, nothing signalling; top: %s", f.idleCores, e.opts.ScaleIdle, f.topCommands))
	for _, c := range []struct {
		path string
		into *float64
	}{{"/v1/stats", &f.statsMs}, {"/v1/devices?state=interrupted&limit=100", &f.listMs}, {"/", &f.pageMs}} {
		if *c.into, err = medianGet(hb, c.path); err != nil {
			return err
		}
		e.add("scale", tag+" GET "+c.path, *c.into, "ms", "median of 5")
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
	top, err := topCommands(e)
	return (cpu1 - cpu0).Seconds() / wall.Seconds(), top, err
}

// topCommands are Redis's three costliest commands since its statistics were reset.
func topCommands(e *env) (string, error) {
	stats, err := testenv.ReadCommandStats(e.ctx, e.redis.client)
	if err != nil {
		return "", err
	}
	names := slices.Collect(maps.Keys(stats))
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(stats[b].Usec, stats[a].Usec) })
	var top []string
	for _, name := range names[:min(3, len(names))] {
		top = append(top, fmt.Sprintf("%s %d calls %.2fs", name, stats[name].Calls, float64(stats[name].Usec)/1e6))
	}
	return strings.Join(top, ", "), nil
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
