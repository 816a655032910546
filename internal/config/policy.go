package config

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heartbeatd/heartbeatd/pkg/schedule"
)

// Policy is a device type's resolved alarm policy.
type Policy struct {
	// Timeout: silence longer than this is an interruption.
	Timeout time.Duration
	// RepeatEvery is the re-alarm interval while still silent; 0 never repeats.
	RepeatEvery time.Duration
	// MaxRepeats is the number of re-alarms before `exhausted`; 0 repeats until recovery or ack.
	MaxRepeats int
	// WarnAfter, when > 0, is when after the last signal the device is reported `late`; it is shorter
	// than Timeout (0 for a device whose own timeout is not longer).
	WarnAfter time.Duration
	// Flapping: off while Count is 0.
	Flapping Flapping
	// Quiet and Active are the interval names the type wrote or inherited; Calendar evaluates them (nil
	// when both are empty, so a type without intervals pays nothing).
	Quiet, Active []string
	Calendar      *schedule.Calendar
	// Expected is the type's schedule, nil for a type timed by Timeout. With one, Timeout is the longest
	// silence the schedule expects (its longest gap + grace), for where one duration is needed.
	Expected *schedule.Expected
}

// Policies is every configured type's resolved policy. It is immutable once built, so one value may
// be shared by every goroutine; a reload builds a new one.
type Policies struct {
	def            Policy
	byName         map[string]Policy
	from           map[string][3]source // where each of Timeout, RepeatEvery, MaxRepeats came from
	names          []string
	longestTimeout time.Duration
	longestCycle   time.Duration
	longestFlap    time.Duration // the longest flapping window of a type that detects flapping
	anyExpected    bool          // some type has a schedule: Expected looks the type up
	anyWarned      bool          // some type has warn_after: WarnAfter looks the type up
	intervals      map[string]*schedule.Interval
}

// source is where a resolved policy field came from, for the policy table.
type source uint8

const (
	fromType    source = iota // written in the type's own entry
	fromDefault               // inherited from types.default
	fromBuiltin               // neither wrote it: BuiltinPolicy
)

// Policies resolves `types`: a field a type does not write inherits from `default`, and one `default`
// does not write from BuiltinPolicy.
func (c *Config) Policies() *Policies {
	p := &Policies{byName: make(map[string]Policy, len(c.Types)+1), from: make(map[string][3]source, len(c.Types)+1)}
	intervals := c.intervals()
	p.intervals = intervals
	var defFrom [3]source
	p.def, defFrom = resolve(c.Types[DefaultType], BuiltinPolicy, [3]source{fromBuiltin, fromBuiltin, fromBuiltin})
	p.def = withSchedules(p.def, c.Types[DefaultType], intervals)
	p.byName[DefaultType], p.from[DefaultType] = p.def, defFrom
	for name, tp := range c.Types {
		if name == DefaultType {
			continue
		}
		p.byName[name], p.from[name] = resolve(tp, p.def, defFrom)
		p.byName[name] = withSchedules(p.byName[name], tp, intervals)
		p.names = append(p.names, name)
	}
	sort.Strings(p.names)
	p.names = append([]string{DefaultType}, p.names...)
	for _, pol := range p.byName {
		p.anyExpected = p.anyExpected || pol.Expected != nil
		p.anyWarned = p.anyWarned || pol.WarnAfter > 0
		p.longestTimeout = max(p.longestTimeout, pol.Timeout)
		p.longestCycle = max(p.longestCycle, pol.Timeout+pol.RepeatEvery)
		if pol.Flapping.Count > 0 {
			p.longestFlap = max(p.longestFlap, pol.Flapping.Window)
		}
	}
	return p
}

// resolve fills the fields tp does not write from parent. A field inherited from a parent that itself
// inherited keeps saying so: default's own sources are passed as parentFrom, and a field default wrote
// counts as fromDefault.
func resolve(tp TypePolicy, parent Policy, parentFrom [3]source) (Policy, [3]source) {
	inherit := func(s source) source {
		if s == fromType {
			return fromDefault
		}
		return s
	}
	pol, from := parent, [3]source{inherit(parentFrom[0]), inherit(parentFrom[1]), inherit(parentFrom[2])}
	if tp.Timeout != nil {
		pol.Timeout, from[0] = *tp.Timeout, fromType
	}
	if tp.RepeatEvery != nil {
		pol.RepeatEvery, from[1] = *tp.RepeatEvery, fromType
	}
	if tp.MaxRepeats != nil {
		pol.MaxRepeats, from[2] = *tp.MaxRepeats, fromType
	}
	if tp.WarnAfter != nil {
		pol.WarnAfter = *tp.WarnAfter
	}
	if tp.Flapping != nil {
		pol.Flapping = *tp.Flapping
	}
	if tp.Quiet != nil {
		pol.Quiet = tp.Quiet
	}
	if tp.Active != nil {
		pol.Active = tp.Active
	}
	pol.Calendar, pol.Expected = nil, nil // built by withSchedules, never inherited as built
	return pol, from
}

// Lookup returns name's policy and whether it is configured. An unknown name ("" included) gets the
// default policy and false, so the caller can count it.
func (p *Policies) Lookup(name string) (pol Policy, known bool) {
	if pol, ok := p.byName[name]; ok {
		return pol, true
	}
	return p.def, false
}

// Expected is the deadline a signal at seen sets for a type with expected times (its schedule's next
// occurrence + grace) and true; false for a type timed by its timeout. Without any schedule it answers
// without a lookup: it is asked for every signal.
func (p *Policies) Expected(name string, seen time.Time) (time.Time, bool) {
	if !p.anyExpected {
		return time.Time{}, false
	}
	pol, _ := p.Lookup(name)
	if pol.Expected == nil {
		return time.Time{}, false
	}
	return pol.Expected.Deadline(seen), true
}

// WarnAfter is the type's warn_after (0: none), what a signal's first deadline is measured with
// (docs/events.md, `late`). Without any warned type it answers without a lookup: it is asked for every
// signal.
func (p *Policies) WarnAfter(name string) time.Duration {
	if !p.anyWarned {
		return 0
	}
	pol, _ := p.Lookup(name)
	return pol.WarnAfter
}

// Interval is the named time interval of the configuration these policies were built from; nil when it
// has none of that name (recurring silences name them).
func (p *Policies) Interval(name string) *schedule.Interval { return p.intervals[name] }

// IntervalNames lists the configured interval names, sorted.
func (p *Policies) IntervalNames() []string {
	names := make([]string, 0, len(p.intervals))
	for n := range p.intervals {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// WithOwnTimeout is the policy of a device of this type registered with its own timeout (docs/http-api.md,
// "Device registry"; 0: the type's own policy): the own timeout replaces the type's and its schedule,
// and the type's warn_after stays only while it is shorter. internal/deadline times the deadlines it writes
// by this method too (owntimeout.go).
func (p Policy) WithOwnTimeout(own time.Duration) Policy {
	if own <= 0 {
		return p
	}
	p.Timeout = own
	p.Expected = nil
	if p.WarnAfter >= own {
		p.WarnAfter = 0 // a warning no earlier than the device's own timeout would say nothing
	}
	return p
}

// Default is the `default` type's policy.
func (p *Policies) Default() Policy { return p.def }

// Names lists the configured types: "default" first, then sorted. The slice is the caller's.
func (p *Policies) Names() []string { return append([]string(nil), p.names...) }

// Timeouts maps every configured type to its timeout. The map is the caller's.
func (p *Policies) Timeouts() map[string]time.Duration {
	out := make(map[string]time.Duration, len(p.names))
	for _, name := range p.names {
		out[name] = p.byName[name].Timeout
	}
	return out
}

// LongestTimeout is the largest timeout of any type.
func (p *Policies) LongestTimeout() time.Duration { return p.longestTimeout }

// LongestCycle is the largest timeout + repeat_every of any type: after it, every deadline and repeat
// written under an old layout has come due (slot doubling retires the old layout then).
func (p *Policies) LongestCycle() time.Duration { return p.longestCycle }

// LongestFlapWindow is the largest flapping window of the types that detect flapping (0: none does): an
// interruption older than it is counted by no type (the sweep deletes such histories).
func (p *Policies) LongestFlapWindow() time.Duration { return p.longestFlap }

// ReplicaIDOrDefault is cluster.replica_id, or hostname-pid when it is empty: unique per process on a
// host and recognisable in /v1/stats.
func (c Cluster) ReplicaIDOrDefault() string {
	if c.ReplicaID != "" {
		return c.ReplicaID
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "heartbeatd"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}

// MQTTProbeTopic is the topic of this replica's MQTT probe ("" when it is off).
func (c *Config) MQTTProbeTopic() string {
	if !c.Ingest.MQTT.Probe.Enabled {
		return ""
	}
	return strings.ReplaceAll(c.Ingest.MQTT.Probe.Topic, "{client_id}", c.MQTTClientID())
}

// MQTTProbeEvery is ingest.mqtt.probe.every, or when it is 0 half of ingest.max_lag, at most 1s.
func (c *Config) MQTTProbeEvery() time.Duration {
	if e := c.Ingest.MQTT.Probe.Every; e > 0 {
		return e
	}
	return min(time.Second, c.Ingest.MaxLag/2)
}

// MQTTClientID is ingest.mqtt.client_id, or when it is empty one derived from this replica:
// "heartbeatd-" and cluster.replica_id when that is set, else the host name. Unlike ReplicaIDOrDefault it
// holds no pid: the client id names a persistent session on the broker (clean session off), and an id
// that changed at every restart would leave a session, and the messages queued for it, behind each time.
// Replicas sharing a host name (several on one host, containers with a fixed hostname) need their own.
func (c *Config) MQTTClientID() string {
	if c.Ingest.MQTT.ClientID != "" {
		return c.Ingest.MQTT.ClientID
	}
	name := c.Cluster.ReplicaID
	if name == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			return "heartbeatd"
		}
		name = host
	}
	return "heartbeatd-" + name
}

// PolicyTable renders the resolved per-type policies as an aligned table for check-config, marking each
// value not written in its own entry. It holds no secret.
func (c *Config) PolicyTable() string {
	p := c.Policies()
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	warnCol := "" // shown only when some type warns, so a table without warnings reads as before
	if p.anyWarned {
		warnCol = "\tWARN_AFTER"
	}
	fmt.Fprintln(tw, "TYPE\tTIMEOUT\tREPEAT_EVERY\tMAX_REPEATS\tFLAPPING"+warnCol)
	marked := [3]bool{}
	for _, name := range p.names {
		pol, from := p.byName[name], p.from[name]
		repeat := FormatDuration(pol.RepeatEvery)
		if pol.RepeatEvery == 0 {
			repeat = "0 (never)"
		}
		maxRepeats := strconv.Itoa(pol.MaxRepeats)
		if pol.MaxRepeats == 0 {
			maxRepeats = "0 (unlimited)"
		}
		mark := func(s string, src source) string {
			marked[src] = true
			switch src {
			case fromDefault:
				return s + " *"
			case fromBuiltin:
				return s + " **"
			}
			return s
		}
		flapping := "off"
		if f := pol.Flapping; f.Count > 0 {
			flapping = fmt.Sprintf("%d in %s", f.Count, FormatDuration(f.Window))
		}
		warn := ""
		if p.anyWarned {
			warn = "\toff"
			if pol.WarnAfter > 0 {
				warn = "\t" + FormatDuration(pol.WarnAfter)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s%s\n", name, mark(FormatDuration(pol.Timeout), from[0]), mark(repeat, from[1]),
			mark(maxRepeats, from[2]), flapping, warn)
	}
	_ = tw.Flush()
	if marked[fromDefault] || marked[fromBuiltin] {
		b.WriteString("\n")
	}
	if marked[fromDefault] {
		b.WriteString("*  inherited from types.default\n")
	}
	if marked[fromBuiltin] {
		fmt.Fprintf(&b, "** built-in default (types.default does not set it)\n")
	}
	return b.String()
}

// FormatDuration writes d the way a config would ("5m", "1h30m", "1.5s") rather than time.Duration's
// "5m0s".
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
