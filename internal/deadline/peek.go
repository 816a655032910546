package deadline

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
)

// Peek reads the earliest deadline, alarm entry and reported failure of each of slots in one pipeline,
// claiming nothing. It reports whether a Claim with opts would find work in any of them (a deadline due by
// the claim's watermark, an alarm entry due by now, or a reported failure whose deadline passed, which a
// signal older than it may have moved on: every claim step starts from one of those),
// and the earliest scores, as Claim does. An idle wake-up then costs Redis three `ZRANGE … 0 0` per slot
// (the third on a key that only exists while a reported failure is pending) instead of a claim's scripts
// (docs/scaling.md).
//
// The test is conservative: a deadline held back by a per-type watermark only (hold-back after a blind
// window) counts as due, and the claim that follows finds it held, as it would have without the peek.
// While hold-back holds some types, the earliest deadline may be held, so each slot's next deadline is
// the first after now of a type not held among its first nextScanBound members (read instead of the
// first alone: one command per slot still); while it holds every type there is none.
func (s *Store) Peek(ctx context.Context, slots []int, opts ClaimOptions) (due bool, res ClaimResult, err error) {
	if len(slots) == 0 {
		return false, res, nil
	}
	wm := opts.watermark()
	low, byIndex := s.watermarks(wm, opts.WatermarkFor)
	held := low.Before(opts.Now)
	pipe := s.rdb.Pipeline()
	deadlines := make([]*redis.ZSliceCmd, len(slots))
	alarms := make([]*redis.ZSliceCmd, len(slots))
	reported := make([]*redis.ZSliceCmd, len(slots))
	lastRank := int64(0) // of each slot's deadlines read
	if held && byIndex != nil {
		lastRank = nextScanBound - 1
	}
	for i, slot := range slots {
		deadlines[i] = pipe.ZRangeWithScores(ctx, s.keys.Deadlines(slot), 0, lastRank)
		alarms[i] = pipe.ZRangeWithScores(ctx, s.keys.alarms(slot), 0, 0)
		reported[i] = pipe.ZRangeWithScores(ctx, s.keys.reported(slot), 0, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return false, res, fmt.Errorf("deadline: peek: %w", err)
	}
	var nextDeadline, nextAlarm int64 = -1, -1
	failed := false // a reported failure's deadline passed: the claim looks at it (claim.go, section 0)
	res.SlotNext = make([]time.Time, len(slots))
	for i := range slots {
		slotDeadline, slotAlarm := int64(-1), int64(-1)
		if z := deadlines[i].Val(); len(z) > 0 {
			slotDeadline = int64(math.Floor(z[0].Score / MaxTypes))
		}
		// A dormant entry is never due (dormantAfter).
		if z := alarms[i].Val(); len(z) > 0 && z[0].Score < dormantAfter {
			slotAlarm = actMillis(z[0].Score)
		}
		if z := reported[i].Val(); len(z) > 0 && int64(z[0].Score) <= opts.Now.UnixMilli() {
			failed = true
		}
		nextDeadline, nextAlarm = earliest(nextDeadline, slotDeadline), earliest(nextAlarm, slotAlarm)
		if held {
			slotDeadline = -1
			if byIndex != nil {
				slotDeadline = firstNotHeld(deadlines[i].Val(), byIndex, low, opts.Now)
			}
		}
		res.SlotNext[i] = msTime(float64(earliest(slotDeadline, slotAlarm)))
	}
	due = (nextDeadline >= 0 && nextDeadline <= wm.UnixMilli()) || (nextAlarm >= 0 && nextAlarm <= opts.Now.UnixMilli()) || failed
	if !held {
		res.NextDeadline = msTime(float64(nextDeadline))
	}
	res.NextAlarm = msTime(float64(nextAlarm))
	return due, res, nil
}

// firstNotHeld is the deadline (ms) of the first of members due after now whose type's watermark
// (byIndex; low past it) is not before now, or -1.
func firstNotHeld(members []redis.Z, byIndex []time.Time, low, now time.Time) int64 {
	for _, z := range members {
		dl, typ := scoreDeadline(z.Score)
		if !dl.After(now) {
			continue
		}
		wm := low
		if typ < len(byIndex) {
			wm = byIndex[typ]
		}
		if !wm.Before(now) {
			return dl.UnixMilli()
		}
	}
	return -1
}
