package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// costScenario reads what one applied signal costs Redis and the Go client, like for like with the
// common alternative: `SET key PX ttl` per device, pipelined (the keyspace-notification design). Each
// case is one pass over the whole fleet in batches as ingest sends them by default, after `CONFIG RESETSTAT`; the
// figures are the pass's `INFO commandstats` time per signal (Redis's time in the commands), Redis's
// process CPU per signal (commands, protocol and I/O) and this process's CPU per signal (the client).
func costScenario(e *env) error {
	n := e.opts.Devices
	if err := e.redis.flush(e.ctx); err != nil {
		return err
	}
	st, err := newStore(e, 64, nil)
	if err != nil {
		return err
	}
	if err := preload(e.ctx, st, n); err != nil {
		return err
	}
	rdb := e.redis.client
	// The peer's keys, preloaded, so its pass updates keys that exist, as a live fleet's resets do.
	if err := passSetPX(e.ctx, rdb, identity(n)); err != nil {
		return err
	}
	// Each random case has an order of its own: a pass in the order of the pass before it is periodic.
	// A jittered pass is the order before it with each device early or late by up to 5% of the period,
	// as a fleet of periodic devices whose clocks and networks wander a little signals. Its cost grows
	// over the first passes as Redis's memory scatters, so the measured one follows settling passes.
	periodic := identity(n)
	setPXJitter, refreshJitter := jitteredPasses(periodic, settlingPasses+1), jitteredPasses(periodic, settlingPasses+2)
	type costCase struct {
		name    string
		order   []int
		pass    func(order []int) error
		prepare func() error // unmeasured, right before the pass; nil: nothing
	}
	refreshPass := func(typed bool) func(order []int) error {
		return func(order []int) error { return passRefresh(e.ctx, st, order, typed) }
	}
	setPass := func(order []int) error { return passSetPX(e.ctx, rdb, order) }
	smallPass := func(order []int) error { return passSortedSets(e.ctx, rdb, order, smallSetOf) }
	ownSetPass := func(order []int) error { return passSortedSets(e.ctx, rdb, order, ownSetOf) }
	// settle runs the unmeasured passes of a jittered chain.
	settle := func(chain [][]int, pass func(order []int) error) func() error {
		return func() error {
			for _, order := range chain[:settlingPasses] {
				if err := pass(order); err != nil {
					return err
				}
			}
			return nil
		}
	}
	cases := []costCase{
		// Periodic first: a random pass leaves no order for a periodic one to follow.
		{"SET PX pipelined, periodic", periodic, setPass, nil},
		{"Refresh typed, periodic", periodic, refreshPass(true), nil},
		{"Refresh untyped, periodic", periodic, refreshPass(false), nil},
		{"SET PX pipelined, jittered 5%", setPXJitter[settlingPasses], setPass, settle(setPXJitter, setPass)},
		{"Refresh typed, jittered 5%", refreshJitter[settlingPasses], refreshPass(true), settle(refreshJitter, refreshPass(true))},
		{"Refresh untyped, jittered 5%", refreshJitter[settlingPasses+1], refreshPass(false), nil},
		{"SET PX pipelined, random", rand.Perm(n), setPass, nil},
		{"Refresh typed, random", rand.Perm(n), refreshPass(true), nil},
		{"Refresh untyped, random", rand.Perm(n), refreshPass(false), nil},
		{"SET PX pipelined, random again", rand.Perm(n), setPass, nil},
		// Preloaded last, so the other cases run on the same Redis as before.
		{"ZADD GT into 65,536 small sets (not heartbeatd's layout), periodic", periodic, smallPass,
			func() error { return smallPass(periodic) }},
		{"ZADD GT into 65,536 small sets (not heartbeatd's layout), random", rand.Perm(n), smallPass, nil},
		{"ZADD GT into a set per device (not heartbeatd's layout), random", rand.Perm(n), ownSetPass,
			func() error { return ownSetPass(periodic) }},
	}
	for _, c := range cases {
		if c.prepare != nil {
			if err := c.prepare(); err != nil {
				return fmt.Errorf("hbbench: cost %s: %w", c.name, err)
			}
		}
		got, err := measureCost(e.ctx, rdb, func() error { return c.pass(c.order) })
		if err != nil {
			return fmt.Errorf("hbbench: cost %s: %w", c.name, err)
		}
		per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 / float64(len(c.order)) }
		e.add("cost", c.name+": commandstats", per(got.commands), "µs/signal", fmt.Sprintf("%d signals, %.0f/s", len(c.order), float64(len(c.order))/got.wall.Seconds()))
		e.add("cost", c.name+": redis CPU", per(got.redisCPU), "µs/signal", "used_cpu_user+sys")
		e.add("cost", c.name+": client CPU", per(got.clientCPU), "µs/signal", "hbbench's own CPU (the Go client side)")
	}
	return nil
}

func identity(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// settlingPasses are the jittered passes run before the measured one: in a standalone run of 64 sets,
// ZADD GT went from 1.25 µs on the first jittered pass to 1.57 on the fifth and 1.63 on the eighth.
const settlingPasses = 5

// jitteredPasses is a chain of n jittered orders, each following the one before it, the first prev's.
func jitteredPasses(prev []int, n int) [][]int {
	chain := make([][]int, n)
	for i := range chain {
		prev = jittered(prev, 0.05)
		chain[i] = prev
	}
	return chain
}

// jittered is the order of a pass after one in prev when each device signals up to ±j of the period
// early or late: its place in prev, moved by a uniform random fraction of the fleet.
func jittered(prev []int, j float64) []int {
	type arrival struct {
		at     float64
		device int
	}
	arrivals := make([]arrival, len(prev))
	for k, d := range prev {
		arrivals[k] = arrival{float64(k)/float64(len(prev)) + (rand.Float64()*2-1)*j, d}
	}
	slices.SortFunc(arrivals, func(a, b arrival) int { return cmp.Compare(a.at, b.at) })
	out := make([]int, len(prev))
	for k, a := range arrivals {
		out[k] = a.device
	}
	return out
}

type passCost struct {
	commands, redisCPU, clientCPU, wall time.Duration
}

// measureCost runs pass between two readings of Redis's command time and CPU and this process's CPU.
func measureCost(ctx context.Context, rdb *redis.Client, pass func() error) (passCost, error) {
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return passCost{}, err
	}
	cpu0, err := redisCPU(ctx, rdb)
	if err != nil {
		return passCost{}, err
	}
	self0, start := selfCPU(), time.Now()
	if err := pass(); err != nil {
		return passCost{}, err
	}
	wall, self1 := time.Since(start), selfCPU()
	cpu1, err := redisCPU(ctx, rdb)
	if err != nil {
		return passCost{}, err
	}
	commands, err := commandTime(ctx, rdb)
	if err != nil {
		return passCost{}, err
	}
	return passCost{commands: commands, redisCPU: cpu1 - cpu0, clientCPU: self1 - self0, wall: wall}, nil
}

// commandTime is the time Redis spent in commands since the last `CONFIG RESETSTAT`, from INFO
// commandstats, leaving out INFO and CONFIG, which are the measurement's own.
func commandTime(ctx context.Context, rdb *redis.Client) (time.Duration, error) {
	stats, err := testenv.ReadCommandStats(ctx, rdb)
	if err != nil {
		return 0, err
	}
	var usec int64
	for name, st := range stats {
		if !strings.HasPrefix(name, "info") && !strings.HasPrefix(name, "config") {
			usec += st.Usec
		}
	}
	return time.Duration(usec) * time.Microsecond, nil
}

// redisCPU is the server's user + system CPU from INFO cpu.
func redisCPU(ctx context.Context, rdb *redis.Client) (time.Duration, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, fmt.Errorf("INFO cpu %s: %w", k, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// selfCPU is this process's user + system CPU so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// passBatches runs send over order in batches of ingest.batch, ingest.max_in_flight in flight, as ingest
// sends them by default.
func passBatches(order []int, send func(batch []int) error) error {
	size, workers := config.DefaultIngestBatch, config.DefaultIngestMaxInFlight
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(int64(size))) - size
				if i >= len(order) {
					return
				}
				if err := send(order[i:min(i+size, len(order))]); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func passRefresh(ctx context.Context, st *deadline.Store, order []int, typed bool) error {
	return passBatches(order, func(batch []int) error {
		now := time.Now()
		sigs := make([]deadline.Signal, len(batch))
		for j, d := range batch {
			sigs[j] = deadline.Signal{Device: deviceID(d), Seen: now}
			if typed {
				sigs[j].Type = benchTypes[d%len(benchTypes)]
			}
		}
		return st.Refresh(ctx, sigs)
	})
}

// passSetPX resets each device's key with SET PX, one command per device in a pipeline per batch.
func passSetPX(ctx context.Context, rdb *redis.Client, order []int) error {
	return passBatches(order, func(batch []int) error {
		pipe := rdb.Pipeline()
		for _, d := range batch {
			pipe.Set(ctx, "ks:"+deviceID(d), "1", benchTimeout(benchTypes[d%len(benchTypes)]))
		}
		_, err := pipe.Exec(ctx)
		return err
	})
}

// smallSets is a layout heartbeatd does not use: the fleet's deadlines spread over 65,536 sorted sets,
// which Redis keeps as listpacks at up to 128 members. Its passes show what a signal would cost Redis in
// sets that small, beside the skip lists of the product's slots (docs/benchmarks.md, "What limits it").
const smallSets = 1 << 16

// smallSetOf is a device's set in the smallSets layout.
func smallSetOf(d int) string { return "small:" + strconv.Itoa(d%smallSets) }

// ownSetOf is a device's set in a layout of a sorted set per device: the least work a sorted set can do
// per signal, the floor of every layout of them.
func ownSetOf(d int) string { return "own:" + deviceID(d) }

// passSortedSets moves each device's deadline in the sorted set setOf names with ZADD GT, one command per
// device in a pipeline per batch.
func passSortedSets(ctx context.Context, rdb *redis.Client, order []int, setOf func(device int) string) error {
	return passBatches(order, func(batch []int) error {
		score := float64(time.Now().UnixMilli())
		pipe := rdb.Pipeline()
		for _, d := range batch {
			pipe.ZAddGT(ctx, setOf(d), redis.Z{Score: score, Member: deviceID(d)})
		}
		_, err := pipe.Exec(ctx)
		return err
	})
}
