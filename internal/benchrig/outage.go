package benchrig

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/correlate"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// outagePolicyYAML: the cell's devices and a lone device of a type of its own, correlated by type, with
// no repeats, so every device yields exactly one interrupted event.
const outagePolicyYAML = `
types:
  default: {timeout: 30s, repeat_every: 0s}
  lone:    {timeout: 30s, repeat_every: 0s}
`

// NewOutage builds the rig of the Outage runs: New with the outage's types (outagePolicyYAML).
func NewOutage(rdb redis.UniversalClient, expected int) (*Rig, error) {
	return build(rdb, expected, outagePolicyYAML)
}

// OutageOptions sizes an Outage run.
type OutageOptions struct {
	Devices    int           // the cell: devices of one type with one deadline
	MinDevices int           // correlation.min_devices
	GroupWait  time.Duration // correlation.group_wait
}

// OutageResult is what an Outage run measured.
type OutageResult struct {
	// Pages are the interrupted events without an outage id or a parent: what a consumer pages on.
	Pages int
	// Started counts the outages announced (copies of one outage_started, with its id, counted once);
	// Copies counts every outage_started event, copies included.
	Started, Copies int
	// Last is from the cell's deadline until Kafka acknowledged its last member's event.
	Last time.Duration
	// Lone is how late the lone device's interrupted was (event time − deadline): group_wait shows here.
	Lone time.Duration
}

// Outage gives a cell of o.Devices devices one deadline, and one lone device of another type the same
// deadline, with correlation by type on, and counts the pages.
func (r *Rig) Outage(ctx context.Context, o OutageOptions) (OutageResult, error) {
	var res OutageResult
	if err := r.reset(ctx); err != nil {
		return res, err
	}
	corr := correlate.New(correlate.Options{Client: r.rdb, Store: r.Store, Sink: r.Events, ReplicaID: "bench",
		Correlation: config.Correlation{By: []string{config.CorrelateByType}, MinDevices: o.MinDevices, Window: 10 * time.Second,
			GroupWait: o.GroupWait}})
	due := FirstDeadline(o.Devices)
	err := RefreshBatches(ctx, r.Store, 4096, o.Devices+1, func(i int) deadline.Signal {
		if i == o.Devices {
			return deadline.Signal{Device: "lone", Type: "lone", Seen: due.Add(-r.timeout())}
		}
		return deadline.Signal{Device: measuredPrefix + strconv.Itoa(i), Type: config.DefaultType, Seen: due.Add(-r.timeout())}
	})
	if err != nil {
		return res, err
	}
	if !time.Now().Before(due) {
		return res, errors.New("benchrig: scheduling the cell outlasted the margin before its deadline")
	}
	stop := r.startScannerWith(corr)
	got, waitErr := r.Events.Wait(ctx, event.Interrupted, "", o.Devices+1, time.Minute+o.GroupWait)
	if err := errors.Join(waitErr, stop()); err != nil {
		return res, err
	}
	var last time.Time
	outages := map[string]bool{}
	for _, p := range slices.Clone(got) {
		switch {
		case p.Kind == event.OutageStarted:
			// Copies of one outage_started share the group's device id and the outage's start.
			outages[p.DeviceID+"@"+p.At.String()] = true
			res.Copies++
		case p.Kind != event.Interrupted:
		case p.DeviceID == "lone":
			res.Lone = p.At.Sub(p.Deadline)
			res.Pages++
		default:
			last = latest(last, p.AckedAt)
			if !p.Explained {
				res.Pages++
			}
		}
	}
	res.Started, res.Last = len(outages), last.Sub(due)
	return res, nil
}
