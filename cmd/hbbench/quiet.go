package main

import (
	"fmt"

	"github.com/heartbeatd/heartbeatd/internal/benchrig"
)

func init() { register("quiet", quietScenario) }

// quietScenario: -expiry-devices devices of a type with a quiet interval aligned to the wall clock (whole
// minutes) get one deadline inside it, so every claim defers its device to the interval's end + timeout
// (-quiet-timeout) and all of them fall due there at once; beside the same burst of devices without intervals, one
// deadline for all, run before and after it on the same rig. Lateness = event `at` − the deadline it
// reports (the moved one after a deferral); the burst figures of each run and the quiet run's p99 and
// max against the plain runs' mean.
func quietScenario(e *env) error {
	n := e.opts.ExpiryDevices
	r, err := benchrig.NewQuiet(e.redis.client, n, e.opts.QuietTimeout)
	if err != nil {
		return err
	}
	defer r.Close()
	var before, quiet, after benchrig.BurstResult
	if before, err = r.Burst(e.ctx, n); err != nil {
		return fmt.Errorf("plain burst before: %w", err)
	}
	if quiet, err = r.Quiet(e.ctx, n); err != nil {
		return fmt.Errorf("quiet burst: %w", err)
	}
	if after, err = r.Burst(e.ctx, n); err != nil {
		return fmt.Errorf("plain burst after: %w", err)
	}
	q := func(res benchrig.BurstResult, p float64) float64 {
		return benchrig.Ms(benchrig.Quantile(res.Lateness, p))
	}
	note := fmt.Sprintf("%d devices due at one instant", n)
	for _, run := range []struct {
		name string
		res  benchrig.BurstResult
	}{{"plain before", before}, {"quiet end", quiet}, {"plain after", after}} {
		e.add("quiet", run.name+": lateness p50", q(run.res, 0.5), "ms", note)
		e.add("quiet", run.name+": lateness p99", q(run.res, 0.99), "ms", "")
		e.add("quiet", run.name+": lateness max", q(run.res, 1), "ms", "")
		e.add("quiet", run.name+": last acked", benchrig.Ms(benchrig.Quantile(run.res.Acked, 1)), "ms", "Kafka ack − deadline")
		e.add("quiet", run.name+": early events", float64(run.res.Early), "count", "must be 0")
	}
	p99, most := (q(before, 0.99)+q(after, 0.99))/2, (q(before, 1)+q(after, 1))/2
	e.add("quiet", "quiet end p99 / plain p99", q(quiet, 0.99)/p99, "ratio", fmt.Sprintf("plain: mean of %.0f and %.0f ms", q(before, 0.99), q(after, 0.99)))
	e.add("quiet", "quiet end max / plain max", q(quiet, 1)/most, "ratio", fmt.Sprintf("plain: mean of %.0f and %.0f ms", q(before, 1), q(after, 1)))
	return nil
}
