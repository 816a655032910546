package benchrig

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// quietType is the type of the Quiet runs' devices: the rig's timeout, quiet inside the run's interval.
const quietType = "night"

// quietPolicyYAML: the rig's type, without intervals (the plain bursts), and quietType, quiet inside
// "bench-quiet", both with one timeout (%[1]s); a quiet run aligns the interval's times (%[2]s) to the
// wall clock: whole minutes, as Alertmanager's times are.
const quietPolicyYAML = `
types:
  default: {timeout: %[1]s, repeat_every: 0s}
  night:   {timeout: %[1]s, repeat_every: 0s, quiet: [bench-quiet]}
time_intervals:
  - name: bench-quiet
    time_intervals: [{times: [%[2]s]}]
`

// NewQuiet builds the rig of the Quiet and Burst runs: New with a type quiet in an interval each quiet
// run sets afresh (quietPolicyYAML), and timeout for both types.
func NewQuiet(rdb redis.UniversalClient, expected int, timeout time.Duration) (*Rig, error) {
	return build(rdb, expected, quietPolicy(timeout, time.Now()))
}

// quietPolicy is quietPolicyYAML with the quiet interval around at (quietWindow).
func quietPolicy(timeout time.Duration, at time.Time) string {
	return fmt.Sprintf(quietPolicyYAML, timeout, quietTimes(quietWindow(at)))
}

// quietWindow is a quiet interval of whole UTC minutes that holds at: from at's minute to the minute
// boundary after at + 2 s, so deadlines written until at lie inside it, and its end is near them.
func quietWindow(at time.Time) (start, end time.Time) {
	at = at.UTC()
	return at.Truncate(time.Minute), at.Add(2 * time.Second).Truncate(time.Minute).Add(time.Minute)
}

// quietTimes writes [start, end) as Alertmanager's times: "24:00" for midnight as an end, two ranges
// when it crosses midnight.
func quietTimes(start, end time.Time) string {
	hhmm := func(t time.Time) string { return t.Format("15:04") }
	midnight := start.Truncate(24 * time.Hour).Add(24 * time.Hour)
	switch {
	case end.Before(midnight):
		return fmt.Sprintf("{start_time: %q, end_time: %q}", hhmm(start), hhmm(end))
	case end.Equal(midnight):
		return fmt.Sprintf("{start_time: %q, end_time: \"24:00\"}", hhmm(start))
	}
	return fmt.Sprintf("{start_time: %q, end_time: \"24:00\"}, {start_time: \"00:00\", end_time: %q}", hhmm(start), hhmm(end))
}

// BurstResult is what a Burst or Quiet run measured.
type BurstResult struct {
	// Deadline is the burst's: the one every device was given, or the quiet interval's end + timeout.
	Deadline time.Time
	// Lateness is each event's time minus its deadline; Acked is Kafka's acknowledgement minus it. Sorted.
	Lateness, Acked []time.Duration
	Early, Wrong    int // events before the burst's deadline; events reporting another deadline
}

// Burst gives n devices without intervals one and the same deadline and measures how late each is
// detected: the baseline of Quiet, the same burst without a quiet interval.
func (r *Rig) Burst(ctx context.Context, n int) (BurstResult, error) {
	if err := r.reset(ctx); err != nil {
		return BurstResult{}, err
	}
	due := burstDeadline(n)
	if err := r.scheduleTyped(ctx, config.DefaultType, n, due); err != nil {
		return BurstResult{}, err
	}
	return r.awaitBurst(ctx, n, due)
}

// Quiet gives n devices of quietType one deadline inside a quiet interval aligned to the wall clock:
// each claim defers its device to the interval's end + timeout, where all of them fall due at once. It
// measures how late each is detected at that moved deadline (docs/schedules.md).
func (r *Rig) Quiet(ctx context.Context, n int) (BurstResult, error) {
	due := burstDeadline(n)
	_, end := quietWindow(due)
	cfg, err := config.Parse([]byte(quietPolicy(r.timeout(), due)), func(string) (string, bool) { return "", false })
	if err != nil {
		return BurstResult{}, err
	}
	r.policies = cfg.Policies()
	if err := r.reset(ctx); err != nil {
		return BurstResult{}, err
	}
	if err := r.scheduleTyped(ctx, quietType, n, due); err != nil {
		return BurstResult{}, err
	}
	return r.awaitBurst(ctx, n, end.Add(r.timeout()))
}

// burstDeadline leaves time to write n devices before their deadline: FirstDeadline's margin assumes
// 60k signals/s, which a shared machine under load may not give a million devices; this one 25k/s.
func burstDeadline(n int) time.Time {
	return time.Now().Add(time.Second + time.Duration(n)*time.Second/25_000).Truncate(time.Millisecond)
}

// scheduleTyped writes n measured devices of typ whose deadline is due, failing when that outlasted the
// margin before it.
func (r *Rig) scheduleTyped(ctx context.Context, typ string, n int, due time.Time) error {
	err := RefreshBatches(ctx, r.Store, 4096, n, func(i int) deadline.Signal {
		return deadline.Signal{Device: measuredPrefix + strconv.Itoa(i), Type: typ, Seen: due.Add(-r.timeout())}
	})
	if err == nil && !time.Now().Before(due) {
		err = fmt.Errorf("benchrig: scheduling %d devices outlasted the margin before their deadline", n)
	}
	return err
}

// awaitBurst runs the scanner until Kafka acknowledged n interrupted events and measures them against due.
func (r *Rig) awaitBurst(ctx context.Context, n int, due time.Time) (BurstResult, error) {
	stop := r.startScanner()
	// Minutes beyond the deadline: on a loaded shared machine a million deferrals and events take them.
	got, waitErr := r.Events.Wait(ctx, event.Interrupted, measuredPrefix, n, time.Until(due)+5*time.Minute)
	if err := errors.Join(waitErr, stop()); err != nil {
		return BurstResult{}, err
	}
	res := BurstResult{Deadline: due}
	for _, p := range got {
		if p.Kind != event.Interrupted || !strings.HasPrefix(p.DeviceID, measuredPrefix) {
			continue
		}
		if !p.Deadline.Equal(due) {
			res.Wrong++
			continue
		}
		if p.At.Before(due) {
			res.Early++
		}
		res.Lateness = append(res.Lateness, p.At.Sub(due))
		res.Acked = append(res.Acked, p.AckedAt.Sub(due))
	}
	slices.Sort(res.Lateness)
	slices.Sort(res.Acked)
	if res.Wrong > 0 {
		return res, fmt.Errorf("benchrig: %d of %d events reported another deadline than %s", res.Wrong, n, due.Format(time.StampMilli))
	}
	return res, nil
}
