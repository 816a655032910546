// Command hbbench measures heartbeatd against baselines measured in the same run: it starts its own
// redis-server (and mosquitto, in-process kfake brokers and, for rss, the heartbeatd binary), runs named
// scenarios and prints a table and, with -json, JSON. Every child process is stopped at the end, on
// error and on Ctrl-C; on Linux the kernel kills them too if hbbench itself dies.
//
//	go run ./cmd/hbbench                                        # the make bench size
//	go run ./cmd/hbbench -devices 1000000 -scenarios lateness,memory,rss
//	go run ./cmd/hbbench -scenarios refresh,lateness -json out.json
//	go run ./cmd/hbbench -scenarios storm -storm-fleet 1000000
//
// Scenarios: refresh, memory, ingest, lateness (with the keyspace-notification baseline), expiry,
// storm (gateways and the devices behind them going dark, against plain devices), recovered, rss, cost
// (Redis and client time per signal beside pipelined SET PX), daemon-cpu (the binary's CPU per million
// Kafka signals; -heartbeatd-baseline for an A/B), http (POST /v1/signals beside the Kafka ingest); see
// docs/benchmarks.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

// result is one measured figure.
type result struct {
	Scenario string  `json:"scenario"`
	Metric   string  `json:"metric"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Note     string  `json:"note,omitempty"`
}

// options are the sizes of one run.
type options struct {
	Devices        int           // memory, lateness, keyspace baseline, rss, refresh fleet
	Window         time.Duration // lateness deadlines spread over it
	Duration       time.Duration // each timed refresh load (and the redis-benchmark size)
	Signals        int           // ingest backlog
	ExpiryDevices  int
	RecoverDevices int
	RefreshRate    int           // signals/s of the load beside the lateness scenario; 0 = unpaced
	QuietTimeout   time.Duration // the quiet scenario's timeout: its burst falls due this long after the interval
	Scenarios      []string
	HeartbeatdBin  string
	BaselineBin    string    // daemon-cpu, blind, idle: the binary to compare with, in alternating rounds
	CPUPartitions  int       // daemon-cpu: partitions of the signal topic
	CPURate        int       // daemon-cpu: signals/s of the kept-up pass
	Progress       io.Writer // a line per figure as it is measured

	// The storm scenario: StormGateways × StormPerGateway devices go dark with their gateways in a fleet
	// of StormFleet, StormRounds times, each between two plain runs.
	StormFleet, StormGateways, StormPerGateway, StormRounds int

	// The scale scenario: a fleet of each of ScaleSizes expected devices, the first the baseline; Redis's
	// CPU is measured over ScaleIdle with nothing signalling; the burst's deadlines spread over ScaleWindow.
	ScaleSizes  []int
	ScaleIdle   time.Duration
	ScaleWindow time.Duration
}

func defaultOptions() options {
	return options{Devices: 100_000, Window: 10 * time.Second, Duration: 5 * time.Second, Signals: 200_000,
		ExpiryDevices: 100_000, RecoverDevices: 10_000, StormFleet: 200_000, StormGateways: 1000, StormPerGateway: 100, StormRounds: 1,
		RefreshRate: 50_000, QuietTimeout: 30 * time.Second, CPUPartitions: 4, CPURate: 200_000, Progress: os.Stderr,
		ScaleSizes: []int{1_000_000, 10_000_000}, ScaleIdle: 30 * time.Second, ScaleWindow: 10 * time.Second}
}

type env struct {
	ctx      context.Context
	opts     options
	redis    *redisServer
	results  []result
	versions map[string]string
}

func (e *env) add(scenario, metric string, value float64, unit, note string) {
	e.results = append(e.results, result{scenario, metric, value, unit, note})
	fmt.Fprintf(e.opts.Progress, "  %-10s %-34s %14.2f %-9s %s\n", scenario, metric, value, unit, note)
}

type scenario struct {
	name string
	run  func(e *env) error
}

var scenarios []scenario

func register(name string, run func(e *env) error) {
	scenarios = append(scenarios, scenario{name, run})
}

// report is what a run measured.
type report struct {
	Devices  int               `json:"devices"`
	Cores    int               `json:"cores"`
	Go       string            `json:"go"`
	Versions map[string]string `json:"versions"`
	Results  []result          `json:"results"`
}

// run starts redis-server, runs the selected scenarios (all when none are named) one after another on a
// flushed Redis and stops everything it started. A failed scenario does not stop the others; their
// errors are joined.
func run(ctx context.Context, opts options) (report, error) {
	rep := report{Devices: opts.Devices, Cores: runtime.NumCPU(), Go: runtime.Version()}
	for _, name := range opts.Scenarios {
		if !contains(names(), name) {
			return rep, fmt.Errorf("hbbench: unknown scenario %q (have %s)", name, strings.Join(names(), ","))
		}
	}
	srv, err := startRedis(ctx)
	if err != nil {
		return rep, err
	}
	e := &env{ctx: ctx, opts: opts, redis: srv, versions: map[string]string{"redis": srv.version}}
	defer srv.stop()
	fmt.Fprintf(opts.Progress, "hbbench: %d devices, %s, %d cores, %s\n", opts.Devices, srv.version, runtime.NumCPU(), runtime.Version())
	var errs []error
	for _, s := range scenarios {
		if len(opts.Scenarios) > 0 && !contains(opts.Scenarios, s.name) {
			continue
		}
		if err := srv.flush(ctx); err != nil {
			errs = append(errs, err)
			break
		}
		start := time.Now()
		if err := s.run(e); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
		}
		fmt.Fprintf(opts.Progress, "hbbench: %s took %s\n", s.name, time.Since(start).Round(100*time.Millisecond))
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
	}
	rep.Versions, rep.Results = e.versions, e.results
	return rep, errors.Join(errs...)
}

func main() {
	os.Exit(mainCode())
}

// mainCode is main with an exit code, so every deferred stop runs before the process exits.
func mainCode() int {
	o := defaultOptions()
	flag.IntVar(&o.Devices, "devices", o.Devices, "fleet size for the refresh, memory, lateness (and keyspace baseline) and rss scenarios")
	flag.DurationVar(&o.Window, "window", o.Window, "deadlines of the lateness scenario spread over this window")
	flag.DurationVar(&o.Duration, "duration", o.Duration, "length of each timed refresh load")
	flag.IntVar(&o.Signals, "signals", o.Signals, "backlog size of the ingest scenario (Kafka and MQTT), and signals a round of the http scenario")
	flag.IntVar(&o.ExpiryDevices, "expiry-devices", o.ExpiryDevices, "simultaneous deadlines of the expiry scenario")
	flag.IntVar(&o.RecoverDevices, "recover-devices", o.RecoverDevices, "recovering devices of the recovered scenario")
	flag.IntVar(&o.StormFleet, "storm-fleet", o.StormFleet, "fleet size of the storm scenario (the gateways, the devices behind them and idle others)")
	flag.IntVar(&o.StormGateways, "storm-gateways", o.StormGateways, "gateways going dark in the storm scenario")
	flag.IntVar(&o.StormPerGateway, "storm-per-gateway", o.StormPerGateway, "devices behind each gateway of the storm scenario")
	flag.IntVar(&o.StormRounds, "storm-rounds", o.StormRounds, "storms of the storm scenario, each between two plain runs; the ratio's median is reported")
	flag.IntVar(&o.RefreshRate, "refresh-rate", o.RefreshRate, "signals/s of the refresh load during the lateness scenario (0 = as fast as it goes)")
	flag.DurationVar(&o.QuietTimeout, "quiet-timeout", o.QuietTimeout, "timeout of the quiet scenario's types: its burst falls due this long after the quiet interval's end")
	flag.StringVar(&o.HeartbeatdBin, "heartbeatd", "", "heartbeatd binary for the rss and daemon-cpu scenarios (default: go build ./cmd/heartbeatd)")
	flag.StringVar(&o.BaselineBin, "heartbeatd-baseline", "", "daemon-cpu, blind, idle: a second heartbeatd binary run in alternating rounds, the same-run A/B baseline")
	flag.IntVar(&o.CPUPartitions, "cpu-partitions", o.CPUPartitions, "daemon-cpu: partitions of the signal topic, each drained by its own reader")
	scaleSizes := flag.String("scale-sizes", "1000000,10000000", "scale: fleet sizes, the first the baseline of the others' ratios")
	flag.DurationVar(&o.ScaleIdle, "scale-idle", o.ScaleIdle, "scale: how long Redis's CPU is measured with nothing signalling")
	flag.DurationVar(&o.ScaleWindow, "scale-window", o.ScaleWindow, "scale: the burst's deadlines spread over this window, beginning three windows after its first signal")
	flag.IntVar(&o.CPURate, "cpu-rate", o.CPURate, "daemon-cpu: signals/s of the kept-up pass (a pace the binary keeps up with; the other passes are backlogs)")
	only := flag.String("scenarios", "", "comma-separated scenarios to run (default all): "+strings.Join(names(), ","))
	jsonOut := flag.String("json", "", "also write the results as JSON to this file")
	cpuProfile := flag.String("cpuprofile", "", "write hbbench's own CPU profile (scanner, handler, publisher, kfake) to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "hbbench:", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "hbbench:", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	if *only != "" {
		for _, s := range strings.Split(*only, ",") {
			o.Scenarios = append(o.Scenarios, strings.TrimSpace(s))
		}
	}
	o.ScaleSizes = nil
	for _, v := range strings.Split(*scaleSizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "hbbench: -scale-sizes: %q is not a positive size\n", v)
			return 2
		}
		o.ScaleSizes = append(o.ScaleSizes, n)
	}
	if o.Devices <= 0 || o.Signals <= 0 || o.ExpiryDevices <= 0 || o.RecoverDevices <= 0 || o.Window <= 0 || o.Duration <= 0 ||
		o.StormGateways <= 0 || o.StormPerGateway <= 0 || o.StormRounds <= 0 || o.CPUPartitions <= 0 || o.CPURate <= 0 || o.ScaleIdle <= 0 || o.ScaleWindow <= 0 {
		fmt.Fprintln(os.Stderr, "hbbench: sizes, -window and -duration must be positive")
		return 2
	}
	if o.StormFleet < o.StormGateways*(o.StormPerGateway+1) {
		fmt.Fprintln(os.Stderr, "hbbench: -storm-fleet must hold the gateways and the devices behind them")
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The rss scenario builds the binary when -heartbeatd names none.
	defer testenv.RemoveHeartbeatdBuild()
	rep, err := run(ctx, o)
	printTable(os.Stdout, rep.Results)
	code := 0
	if err != nil {
		fmt.Fprintln(os.Stderr, "hbbench:", err)
		code = 1
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "hbbench:", err)
			code = 1
		}
	}
	return code
}

func printTable(w io.Writer, results []result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tmetric\tvalue\tunit\tnote")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%s\t%s\n", r.Scenario, r.Metric, r.Value, r.Unit, r.Note)
	}
	tw.Flush()
}

func names() []string {
	var n []string
	for _, s := range scenarios {
		n = append(n, s.name)
	}
	return n
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if strings.TrimSpace(v) == s {
			return true
		}
	}
	return false
}
