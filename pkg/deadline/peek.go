package deadline

import (
	"context"
	"fmt"
	"math"

	"github.com/redis/go-redis/v9"
)

// peek reads the earliest deadline and alarm entry of each of slots in one pipeline, claiming nothing. It
// reports whether a Claim with opts would find work in any of them (a deadline due by the claim's
// watermark, or an alarm entry due by now: the claim script's every section starts from one of those
// two), and the earliest scores, as Claim does. An idle wake-up then costs Redis two `ZRANGE … 0 0` per
// slot instead of a claim script (docs/scaling.md).
//
// The test is conservative: a deadline held back by a per-type watermark only (hold-back after a blind
// window) counts as due, and the claim that follows finds it held, as it would have without the peek.
// While hold-back holds any type, the earliest deadline may be held, so it is not reported: only a claim
// tells the next one it may take.
func (s *Store) peek(ctx context.Context, slots []int, opts ClaimOptions) (due bool, res ClaimResult, err error) {
	if len(slots) == 0 {
		return false, res, nil
	}
	wm := opts.watermark()
	low, _ := s.watermarkByIndex(wm, opts.WatermarkFor)
	pipe := s.rdb.Pipeline()
	deadlines := make([]*redis.ZSliceCmd, len(slots))
	alarms := make([]*redis.ZSliceCmd, len(slots))
	for i, slot := range slots {
		deadlines[i] = pipe.ZRangeWithScores(ctx, s.keys.Deadlines(slot), 0, 0)
		alarms[i] = pipe.ZRangeWithScores(ctx, s.keys.alarms(slot), 0, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return false, res, fmt.Errorf("deadline: peek: %w", err)
	}
	var nextDeadline, nextAlarm int64 = -1, -1
	for i := range slots {
		if z := deadlines[i].Val(); len(z) > 0 {
			nextDeadline = earliest(nextDeadline, int64(math.Floor(z[0].Score/MaxTypes)))
		}
		// A dormant entry is never due (dormantAfter).
		if z := alarms[i].Val(); len(z) > 0 && z[0].Score < dormantAfter {
			nextAlarm = earliest(nextAlarm, int64(z[0].Score))
		}
	}
	due = (nextDeadline >= 0 && nextDeadline <= wm.UnixMilli()) || (nextAlarm >= 0 && nextAlarm <= opts.Now.UnixMilli())
	if !low.Before(opts.Now) {
		res.NextDeadline = msTime(float64(nextDeadline))
	}
	res.NextAlarm = msTime(float64(nextAlarm))
	return due, res, nil
}
