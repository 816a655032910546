package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// idleReplicas is how many replicas of the binary the idle scenario runs, as a deployment does.
const idleReplicas = 2

// idleScenario: two replicas of the real binary on hbbench's Redis and a kfake broker; -devices devices
// signal once through Kafka (timeout 10 minutes, so none falls due), then nothing signals. It reads
// Redis's own CPU (INFO cpu, used_cpu_user + used_cpu_sys) over 6 × -duration and the command time of
// the costliest commands: what a fleet costs Redis while it is quiet. With -heartbeatd-baseline the
// baseline pair runs the same in alternating rounds.
func idleScenario(e *env) error {
	bins := e.binaries()
	const rounds = 2
	window := 6 * e.opts.Duration
	cores := map[string][]float64{}
	for r := range rounds {
		for _, b := range bins {
			core, top, err := idleRound(e, b.path, window)
			if err != nil {
				return fmt.Errorf("hbbench: idle %s: %w", b.name, err)
			}
			cores[b.name] = append(cores[b.name], core)
			e.add("idle", fmt.Sprintf("%s round %d: costliest commands", b.name, r+1), float64(len(top)), "commands", strings.Join(top, "; "))
		}
	}
	for _, b := range bins {
		note := fmt.Sprintf("%d replicas, %d devices, nothing signalling, over %s; rounds %s", idleReplicas, e.opts.Devices, window, fmt.Sprintf("%.3f", cores[b.name]))
		if b.name != "baseline" && e.opts.BaselineBin != "" {
			note += fmt.Sprintf("; %.2fx baseline", meanOf(cores[b.name])/meanOf(cores["baseline"]))
		}
		e.add("idle", b.name+" Redis CPU while idle", meanOf(cores[b.name]), "core", note)
	}
	return nil
}

// idleRound runs idleReplicas replicas of bin on a flushed Redis, lets -devices devices signal once and
// returns Redis's CPU (cores) over window once they are stored, and its three costliest commands then.
func idleRound(e *env, bin string, window time.Duration) (float64, []string, error) {
	if err := e.redis.flush(e.ctx); err != nil {
		return 0, nil, err
	}
	k, err := benchrig.Kafka(4, signalTopic, benchrig.EventsTopic, "heartbeat.deadletter")
	if err != nil {
		return 0, nil, err
	}
	defer k.Close()
	for i := range idleReplicas {
		hb, err := launchOnKafka(e, k, bin, "hbbench-idle-"+strconv.Itoa(i))
		if err != nil {
			return 0, nil, err
		}
		defer hb.Close()
	}
	if err := writeSignals(e.ctx, k.Addrs, e.opts.Devices, deviceID); err != nil {
		return 0, nil, err
	}
	store, err := deadline.New(e.redis.client, deadline.Options{Slots: 64, Timeout: benchTimeout})
	if err != nil {
		return 0, nil, err
	}
	for start := time.Now(); ; {
		c, err := store.Count(e.ctx)
		if err != nil {
			return 0, nil, err
		}
		if c.Online >= int64(e.opts.Devices) {
			break
		}
		if time.Since(start) > 5*time.Minute {
			return 0, nil, fmt.Errorf("stored %d of %d devices after 5 minutes", c.Online, e.opts.Devices)
		}
		if !loop.Sleep(e.ctx, 100*time.Millisecond) {
			return 0, nil, e.ctx.Err()
		}
	}
	if err := e.redis.client.ConfigResetStat(e.ctx).Err(); err != nil {
		return 0, nil, err
	}
	before, err := redisCPU(e.ctx, e.redis.client)
	if err != nil {
		return 0, nil, err
	}
	if !loop.Sleep(e.ctx, window) {
		return 0, nil, e.ctx.Err()
	}
	after, err := redisCPU(e.ctx, e.redis.client)
	if err != nil {
		return 0, nil, err
	}
	stats, err := testenv.ReadCommandStats(e.ctx, e.redis.client)
	if err != nil {
		return 0, nil, err
	}
	names := make([]string, 0, len(stats))
	for name := range stats {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return int(stats[b].Usec - stats[a].Usec) })
	top := make([]string, 0, 3)
	for _, name := range names[:min(3, len(names))] {
		top = append(top, fmt.Sprintf("%s %d calls %.0f ms", name, stats[name].Calls, float64(stats[name].Usec)/1000))
	}
	return (after - before).Seconds() / window.Seconds(), top, nil
}

// medianOf is the median of v: the middle one, or the mean of the two in the middle.
func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

func meanOf(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(max(len(v), 1))
}
