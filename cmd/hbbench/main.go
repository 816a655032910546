// Command hbbench measures heartbeatd against baselines measured in the same run: it starts its own
// redis-server (and an in-process Kafka), runs named scenarios and prints a table and JSON.
//
//	go run ./cmd/hbbench                       # the make bench size
//	go run ./cmd/hbbench -devices 1000000      # 1M devices
//	go run ./cmd/hbbench -scenarios refresh,lateness -json out.json
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

// result is one measured figure.
type result struct {
	Scenario string  `json:"scenario"`
	Metric   string  `json:"metric"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Note     string  `json:"note,omitempty"`
}

type env struct {
	ctx     context.Context
	redis   *redisServer
	devices int
	window  time.Duration
	results []result
}

func (e *env) add(scenario, metric string, value float64, unit, note string) {
	e.results = append(e.results, result{scenario, metric, value, unit, note})
	fmt.Fprintf(os.Stderr, "  %-22s %-34s %14.2f %s %s\n", scenario, metric, value, unit, note)
}

type scenario struct {
	name string
	run  func(e *env) error
}

var scenarios []scenario

func register(name string, run func(e *env) error) {
	scenarios = append(scenarios, scenario{name, run})
}

func main() {
	devices := flag.Int("devices", 100_000, "fleet size for the lateness, expiry and memory scenarios")
	window := flag.Duration("window", 10*time.Second, "deadlines of the lateness scenario spread over this window")
	only := flag.String("scenarios", "", "comma-separated scenarios to run (default all): "+names())
	jsonOut := flag.String("json", "", "also write the results as JSON to this file")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	srv, err := startRedis(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hbbench:", err)
		os.Exit(1)
	}
	defer srv.stop()
	e := &env{ctx: ctx, redis: srv, devices: *devices, window: *window}
	fmt.Fprintf(os.Stderr, "hbbench: %d devices, %s, %d cores, %s\n", *devices, srv.version, runtime.NumCPU(), runtime.Version())
	failed := false
	for _, s := range scenarios {
		if *only != "" && !contains(strings.Split(*only, ","), s.name) {
			continue
		}
		if err := srv.flush(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "hbbench:", err)
			os.Exit(1)
		}
		if err := s.run(e); err != nil {
			fmt.Fprintf(os.Stderr, "hbbench: %s: %v\n", s.name, err)
			failed = true
		}
		if ctx.Err() != nil {
			break
		}
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tmetric\tvalue\tunit\tnote")
	for _, r := range e.results {
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%s\t%s\n", r.Scenario, r.Metric, r.Value, r.Unit, r.Note)
	}
	tw.Flush()
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(map[string]any{"devices": *devices, "redis": srv.version, "cores": runtime.NumCPU(), "results": e.results}, "", "  ")
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "hbbench:", err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

func names() string {
	var n []string
	for _, s := range scenarios {
		n = append(n, s.name)
	}
	return strings.Join(n, ",")
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if strings.TrimSpace(v) == s {
			return true
		}
	}
	return false
}
