package benchrig

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// stormPolicyYAML: the devices behind a gateway time out before it (they expire first and wait for its
// verdict), the rest of the fleet never comes due within a run, and nothing repeats, so every dark
// device yields exactly one event.
const stormPolicyYAML = `
types:
  default: {timeout: 30s, repeat_every: 0s}
  gateway: {timeout: 30s, repeat_every: 0s}
  sensor:  {timeout: 28s, repeat_every: 0s}
  idle:    {timeout: 1h,  repeat_every: 0s}
`

// The storm's device names: the dark devices behind the gateways are the measured ones.
const (
	gatewayPrefix = "gw-"
	idlePrefix    = "idle-"
)

// StormOptions size a Storm run.
type StormOptions struct {
	// Fleet is every device in Redis; those that do not go dark are idle (signalled, never due).
	Fleet int
	// Gateways go dark with their PerGateway devices each, which name them as parent in their signals.
	Gateways, PerGateway int
	// Plain is the baseline: the same Gateways×PerGateway devices go dark at once without parents, and
	// the gateways stay idle.
	Plain bool
}

// Dark is how many devices behind gateways go dark.
func (o StormOptions) Dark() int { return o.Gateways * o.PerGateway }

// StormResult is what a Storm run measured.
type StormResult struct {
	Events map[event.Kind]int // every event Kafka acknowledged, by kind
	// DarkInterrupted counts `interrupted` events of the devices behind gateways: 0 in a storm.
	DarkInterrupted int
	// Deadline is the dark devices' deadline, GatewayDeadline the gateways' (later: longer timeout).
	Deadline, GatewayDeadline time.Time
	// GatewaysAcked: Kafka acknowledged the last gateway's `interrupted` (storm only).
	GatewaysAcked time.Time
	// Last: Kafka acknowledged the dark devices' last `suppressed` (storm) or `interrupted` (plain).
	Last  time.Time
	Early int // events before the deadline they report
}

// Storm writes a fleet of o.Fleet devices, then has o.Gateways gateways and the o.PerGateway devices
// behind each go dark at one instant, and measures until Kafka acknowledged the verdict of every dark
// device: one `interrupted` per gateway and one `suppressed` per device behind it, or with o.Plain one
// `interrupted` per dark device. The rig must come from NewStorm. It returns what arrived with an
// error when not every verdict came within a minute past the gateways' deadline and parent_wait.
func (r *Rig) Storm(ctx context.Context, o StormOptions, timer Timer) (StormResult, error) {
	timer = orNoTimer(timer)
	dark := o.Dark()
	if o.Gateways <= 0 || o.PerGateway <= 0 || o.Fleet < dark+o.Gateways {
		return StormResult{}, fmt.Errorf("benchrig: storm of %d gateways × %d devices does not fit a fleet of %d", o.Gateways, o.PerGateway, o.Fleet)
	}
	if err := r.reset(ctx); err != nil {
		return StormResult{}, err
	}
	sensor, _ := r.policies.Lookup("sensor")
	gateway, _ := r.policies.Lookup("gateway")
	res := StormResult{Deadline: FirstDeadline(o.Fleet)}
	lastSeen := res.Deadline.Add(-sensor.Timeout)
	res.GatewayDeadline = lastSeen.Add(gateway.Timeout)
	idleSince := time.Now()
	// The dark devices first, then their gateways, then the idle rest of the fleet; with Plain, the
	// gateways are idle and the dark devices name no parent.
	signal := func(i int) deadline.Signal {
		switch {
		case i < dark:
			s := deadline.Signal{Device: measuredPrefix + strconv.Itoa(i), Type: "sensor", Seen: lastSeen}
			if !o.Plain {
				s.Parent = gatewayPrefix + strconv.Itoa(i/o.PerGateway)
			}
			return s
		case i < dark+o.Gateways:
			id := gatewayPrefix + strconv.Itoa(i-dark)
			if o.Plain {
				return deadline.Signal{Device: id, Type: "idle", Seen: idleSince}
			}
			return deadline.Signal{Device: id, Type: "gateway", Seen: lastSeen}
		}
		return deadline.Signal{Device: idlePrefix + strconv.Itoa(i), Type: "idle", Seen: idleSince}
	}
	if err := RefreshBatches(ctx, r.Store, 4096, o.Fleet, signal); err != nil {
		return res, err
	}
	if !time.Now().Before(res.Deadline) {
		return res, fmt.Errorf("benchrig: writing %d devices outlasted the margin before the first deadline", o.Fleet)
	}
	// The scanner's goroutines carry the run's kind as a pprof label (benchrig=storm or plain), so a CPU
	// profile of hbbench (-cpuprofile) tells the storm's detection from the baseline's and from the
	// fleet's writes (go tool pprof -tagfocus benchrig=storm).
	kind := "storm"
	if o.Plain {
		kind = "plain"
	}
	var stop func() error
	pprof.Do(ctx, pprof.Labels("benchrig", kind), func(context.Context) { stop = r.startScanner() })
	timeout := time.Until(res.GatewayDeadline.Add(r.parentWait)) + time.Minute
	timer.StartTimer()
	var waitErr error
	if o.Plain {
		_, waitErr = r.Events.Wait(ctx, event.Interrupted, measuredPrefix, dark, timeout)
	} else {
		_, waitErr = r.Events.Wait(ctx, event.Suppressed, measuredPrefix, dark, timeout)
	}
	timer.StopTimer()
	if err := stop(); err != nil {
		return res, errors.Join(waitErr, err)
	}
	res.Events = map[event.Kind]int{}
	for _, p := range r.Events.snapshot() {
		res.Events[p.Kind]++
		if p.At.Before(p.Deadline) {
			res.Early++
		}
		isDark := strings.HasPrefix(p.DeviceID, measuredPrefix)
		switch {
		case isDark && p.Kind == event.Interrupted:
			res.DarkInterrupted++
			if o.Plain {
				res.Last = latest(res.Last, p.AckedAt)
			}
		case isDark && p.Kind == event.Suppressed:
			res.Last = latest(res.Last, p.AckedAt)
		case strings.HasPrefix(p.DeviceID, gatewayPrefix) && p.Kind == event.Interrupted:
			res.GatewaysAcked = latest(res.GatewaysAcked, p.AckedAt)
		}
	}
	return res, waitErr
}
