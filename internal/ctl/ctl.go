// Package ctl is `heartbeatd ctl`, a command-line client of the HTTP API for operators, in the manner of
// Alertmanager's amtool (docs/operations.md#heartbeatd-ctl). It prints aligned tables, or the API's JSON
// with -o json; a refused request exits 1 with the server's message.
package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/heartbeatd/heartbeatd/pkg/client"
)

// The environment ctl reads when its flags are not given.
const (
	serverEnv = "HEARTBEATD_URL"
	tokenEnv  = "HEARTBEATD_TOKEN"
)

// usage is ctl's help text.
const usage = `heartbeatd ctl: operate heartbeatd from a terminal, through its HTTP API.

Usage:
  heartbeatd ctl [flags] devices ls [--state online|interrupted] [--type T] [--label k=v] [--limit N] [--cursor C]
  heartbeatd ctl [flags] devices get ID
  heartbeatd ctl [flags] ack ID [--note N] [--by B]
  heartbeatd ctl [flags] signal ID [--type T]  (a signal of the device now, as a cron job would send)
  heartbeatd ctl [flags] silence add (--device ID | --type T | --matcher 'labels.site=~ber.*')...
                                     (--for 2h | --until RFC3339 | --interval NAME...) [--comment C] [--by B]
                         (--matcher, repeatable: labels.NAME, device_type, device_id or parent, then =, !=, =~
                          or !~, then the value; --interval, repeatable: a time_intervals name, recurring)
  heartbeatd ctl [flags] silence ls
  heartbeatd ctl [flags] silence end ID [--note N] [--by B]
  heartbeatd ctl [flags] outages ls
  heartbeatd ctl [flags] import FILE          (.csv as CSV, anything else as NDJSON; - reads stdin)
  heartbeatd ctl [flags] advice
  heartbeatd ctl [flags] stats
  heartbeatd ctl [flags] incidents ID [--limit N] [--cursor C]   (its incidents, newest first)
  heartbeatd ctl [flags] availability [--window 7d] [--group-by device_type|label.NAME]

Flags (before or after the command):
  --server URL       the API (default $HEARTBEATD_URL, else http://127.0.0.1:8080)
  --token-file FILE  a file holding the bearer token (default: the token in $HEARTBEATD_TOKEN)
  -o text|json       aligned tables (default) or the API's JSON

Exit status: 0 on success, 1 when the server refuses or cannot be reached (its message on stderr),
2 for a mistake on the command line.
`

// errUsage marks a command-line mistake (exit 2).
var errUsage = errors.New("usage")

// globals are the flags every command takes.
type globals struct {
	server, tokenFile, output string
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.server, "server", g.server, "the API's base URL")
	fs.StringVar(&g.tokenFile, "token-file", g.tokenFile, "a file holding the bearer token")
	fs.StringVar(&g.output, "o", g.output, "text or json")
}

// Run runs `heartbeatd ctl args…` and returns its exit status.
func Run(args []string, env func(string) (string, bool), stdout, stderr io.Writer) int {
	g := globals{output: "text"}
	if v, ok := env(serverEnv); ok && v != "" {
		g.server = v
	}
	err := run(args, env, &g, stdout)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "heartbeatd ctl: %v\n\n%s", err, usage)
		return 2
	default:
		fmt.Fprintf(stderr, "heartbeatd ctl: %v\n", err)
		return 1
	}
}

func run(args []string, env func(string) (string, bool), g *globals, stdout io.Writer) error {
	fs := newFlagSet("ctl", g)
	if err := fs.Parse(args); err != nil { // the flags before the command; each command parses its own
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	words := fs.Args()
	if len(words) == 0 {
		return fmt.Errorf("%w: a command is needed", errUsage)
	}
	cmd, ok := commands[words[0]]
	if !ok {
		return fmt.Errorf("%w: unknown command %q", errUsage, words[0])
	}
	return cmd(&invocation{g: g, env: env, out: stdout}, words[1:])
}

// invocation is one command being run: its flags, environment and output.
type invocation struct {
	g   *globals
	env func(string) (string, bool)
	out io.Writer
}

// command runs one command with the words after its name (its subcommand, arguments and flags).
type command func(inv *invocation, args []string) error

var commands map[string]command

func init() { // a table, so the usage and the dispatch name the same commands
	commands = map[string]command{
		"devices":      subcommands(map[string]command{"ls": devicesLs, "get": devicesGet}),
		"silence":      subcommands(map[string]command{"add": silenceAdd, "ls": silenceLs, "end": silenceEnd}),
		"outages":      subcommands(map[string]command{"ls": outagesLs}),
		"ack":          ack,
		"signal":       signalDevice,
		"import":       importFile,
		"advice":       advice,
		"stats":        stats,
		"incidents":    incidents,
		"availability": availability,
		"help":         func(*invocation, []string) error { return flag.ErrHelp },
	}
}

func subcommands(subs map[string]command) command {
	return func(inv *invocation, args []string) error {
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			return fmt.Errorf("%w: a subcommand is needed", errUsage)
		}
		sub, ok := subs[args[0]]
		if !ok {
			return fmt.Errorf("%w: unknown subcommand %q", errUsage, args[0])
		}
		return sub(inv, args[1:])
	}
}

func newFlagSet(name string, g *globals) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the error is reported once, with the usage, by Run
	g.register(fs)
	return fs
}

// parse parses flags anywhere among the words (flag stops at the first word) and returns the words.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var words []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		if fs.NArg() == 0 {
			return words, nil
		}
		words = append(words, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// args parses a command's flags and requires exactly n words.
func (inv *invocation) args(fs *flag.FlagSet, args []string, n int, what string) ([]string, error) {
	words, err := parse(fs, args)
	if err != nil {
		return nil, err
	}
	if len(words) != n {
		return nil, fmt.Errorf("%w: %s: want %s", errUsage, fs.Name(), what)
	}
	if inv.g.output != "text" && inv.g.output != "json" {
		return nil, fmt.Errorf("%w: -o %q: want text or json", errUsage, inv.g.output)
	}
	return words, nil
}

// client builds the API client from the flags and environment.
func (inv *invocation) client() (*client.Client, context.Context, context.CancelFunc, error) {
	server := inv.g.server
	if server == "" {
		server = client.DefaultServer
	}
	token, _ := inv.env(tokenEnv)
	if inv.g.tokenFile != "" {
		b, err := os.ReadFile(inv.g.tokenFile)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	c, err := client.New(server, strings.TrimSpace(token))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: --server: %v", errUsage, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	return c, ctx, cancel, nil
}
