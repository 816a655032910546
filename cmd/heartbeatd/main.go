// Command heartbeatd watches an IoT fleet for silence: see README.md.
//
// main is thin on purpose: it parses flags, wires OS signals to a context and a reload channel, and
// hands over to internal/daemon (internal/devstack for dev and simulate).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/ctl"
	"github.com/heartbeatd/heartbeatd/internal/daemon"
	"github.com/heartbeatd/heartbeatd/internal/devstack"
)

// notifyHTTP is where `heartbeatd notify` serves its metrics unless -http says otherwise: beside a daemon
// on its default 127.0.0.1:8080.
const notifyHTTP = "127.0.0.1:8081"

// configEnv names the config file when -config is not given, as containers and units like to.
const configEnv = "HEARTBEATD_CONFIG"

// Set with -ldflags "-X main.version=… -X main.commit=…"; build info fills them otherwise.
var (
	version = ""
	commit  = ""
)

const usage = `heartbeatd watches an IoT fleet for silence.

Usage:
  heartbeatd [run] -config configs/heartbeatd.yaml   run the daemon (default)
  heartbeatd dev [-http 127.0.0.1:8080]              everything in one process with a simulated fleet
  heartbeatd check-config -config FILE               validate a config and print the per-type policy table and tokens
  heartbeatd ctl COMMAND …                           operate a running heartbeatd through its API (heartbeatd ctl help)
  heartbeatd version (or --version)                  version, commit, Go version
  heartbeatd help (or -h, --help)                    this text
  heartbeatd probe URL                               exit 0 when URL answers 200 (container health checks)
  heartbeatd simulate -broker tcp://H:P [-devices N] run only the fleet simulator against an MQTT broker
  heartbeatd notify -config FILE [-http ADDR]        run only the notifier (docs/notifications.md); metrics on
                                                     -http (default 127.0.0.1:8081)
  heartbeatd notify test --receiver NAME -config FILE  send a sample event to one receiver

HEARTBEATD_CONFIG names the config file when -config is not given (default configs/heartbeatd.yaml).
Every config key can be set by environment variable HEARTBEATD_<PATH>, e.g. HEARTBEATD_REDIS_ADDRS.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	if cmd == "help" {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if cmd == "ctl" { // a client with flags of its own
		return ctl.Run(args, os.LookupEnv, stdout, stderr)
	}
	if cmd == "notify" && len(args) > 0 && args[0] == "test" {
		cmd, args = "notify test", args[1:]
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // printed below: to stdout when asked for, to stderr after a mistake
	defaultConfig := "configs/heartbeatd.yaml"
	if p, ok := os.LookupEnv(configEnv); ok && p != "" {
		defaultConfig = p
	}
	configPath := fs.String("config", defaultConfig, "config file (default $"+configEnv+", else configs/heartbeatd.yaml)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	httpListen := fs.String("http", "127.0.0.1:8080", "dev: HTTP listen address; notify: its metrics' (default "+notifyHTTP+")")
	broker := fs.String("broker", "tcp://127.0.0.1:1883", "simulate: MQTT broker")
	devices := fs.Int("devices", 300, "simulate: fleet size")
	receiver := fs.String("receiver", "", "notify test: the receiver to send a sample event to")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return 0
		}
		fmt.Fprint(stderr, usage)
		return 2
	}
	info := buildInfo()
	if *showVersion {
		cmd = "version"
	}
	switch cmd {
	case "version":
		fmt.Fprintf(stdout, "heartbeatd %s (commit %s, %s, %s/%s)\n", info.Version, info.Commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return 0
	case "check-config":
		table, err := daemon.CheckConfig(*configPath, os.LookupEnv)
		if err != nil {
			fmt.Fprintf(stderr, "heartbeatd: %s: %v\n", *configPath, err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: ok\n\n%s", *configPath, table)
		return 0
	case "probe":
		return probe(fs.Arg(0), stderr)
	case "notify test":
		if *receiver == "" {
			fmt.Fprintln(stderr, "heartbeatd notify test: --receiver NAME required")
			return 2
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := daemon.NotifyTest(ctx, *configPath, os.LookupEnv, *receiver); err != nil {
			fmt.Fprintf(stderr, "heartbeatd notify test: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "sent a sample event to %s\n", *receiver)
		return 0
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	reload := make(chan os.Signal, 1)
	signal.Notify(reload, syscall.SIGHUP)
	defer signal.Stop(reload)
	reloads := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-reload:
				select {
				case reloads <- struct{}{}:
				default:
				}
			}
		}
	}()

	var err error
	switch cmd {
	case "run":
		err = daemon.Run(ctx, daemon.Options{ConfigPath: *configPath, Env: os.LookupEnv, Build: info, Reload: reloads})
	case "dev":
		err = devstack.Dev(ctx, devstack.DevOptions{HTTPListen: *httpListen, Build: info, Stdout: stdout, Reload: reloads})
	case "simulate":
		err = devstack.Simulate(ctx, *broker, *devices)
	case "notify":
		listen := notifyHTTP
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "http" {
				listen = *httpListen
			}
		})
		err = daemon.RunNotify(ctx, daemon.NotifyOptions{ConfigPath: *configPath, Env: os.LookupEnv, Build: info, HTTPListen: listen})
	default:
		fmt.Fprintf(stderr, "heartbeatd: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "heartbeatd: %v\n", err)
		return 1
	}
	return 0
}

func buildInfo() daemon.BuildInfo {
	info := daemon.BuildInfo{Version: version, Commit: commit}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && info.Commit == "" {
				info.Commit = s.Value
			}
		}
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	return info
}

// probe is a dependency-free health check for images without curl.
func probe(url string, stderr io.Writer) int {
	if url == "" {
		fmt.Fprintln(stderr, "heartbeatd probe: URL required")
		return 2
	}
	client := http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		fmt.Fprintf(stderr, "heartbeatd probe: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		fmt.Fprintf(stderr, "heartbeatd probe: %s: %s\n", resp.Status, body)
		return 1
	}
	return 0
}
