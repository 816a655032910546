package main

import (
	"fmt"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
)

func init() { register("outage", outageScenario) }

// outageGroupWait is the group_wait of the outage scenario's second run.
const outageGroupWait = 5 * time.Second

// outageScenario: a cell of -expiry-devices devices of one type falls silent at one instant with
// correlation by type (min_devices 50), beside one lone device of another type; once without group_wait,
// once with it. The figures are the pages (interrupted events without an outage id: what a consumer
// pages on), the outage_started events, how late the lone device's event was (what group_wait costs a
// device alone in its group), and when the cell's last member was acknowledged.
func outageScenario(e *env) error {
	n := e.opts.ExpiryDevices
	for _, wait := range []time.Duration{0, outageGroupWait} {
		var res benchrig.OutageResult
		err := func() error {
			r, err := benchrig.NewOutage(e.redis.client, 2*n+2)
			if err != nil {
				return err
			}
			defer r.Close()
			res, err = r.Outage(e.ctx, benchrig.OutageOptions{Devices: n, MinDevices: 50, GroupWait: wait})
			return err
		}()
		if err != nil {
			return fmt.Errorf("hbbench: outage (group_wait %s): %w", wait, err)
		}
		run := fmt.Sprintf("group_wait %s", wait)
		note := fmt.Sprintf("%d devices silent at once, min_devices 50, and 1 lone device", n)
		e.add("outage", run+": pages", float64(res.Pages), "count", note+"; the lone one is 1 of them")
		e.add("outage", run+": outage_started", float64(res.Started), "count",
			fmt.Sprintf("%d copies with its id: every scanner deciding members announces it first", res.Copies))
		e.add("outage", run+": lone device lateness", benchrig.Ms(res.Lone), "ms", "event time − deadline")
		e.add("outage", run+": deadline → last member acked", benchrig.Ms(res.Last), "ms", "")
	}
	return nil
}
