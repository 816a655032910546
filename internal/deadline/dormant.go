package deadline

import (
	"context"
	"fmt"
	"strconv"

	"github.com/heartbeatd/heartbeatd/internal/redisutil"
)

// The dormant sweep closes the one gap the recovery probe leaves (Refresh): a process that dies between
// a refresh's ZADD and its probe leaves the device back in the deadlines set while its incident's alarm
// entry stays where it was. An incident with an act ahead (a repeat, a silence's end) finds the device
// back at that act; a dormant one (doc.go) has none, so nothing would ever report its recovery. Each
// slot's owner looks over its slot's dormant alarm entries every sweep.Options.Every (internal/sweep
// runs SweepDormant) and makes those whose device is back due at once; the scanner then reports
// `recovered` as after a probe, within Every and one pass of the signal. A pass costs Redis about a microsecond per alarm entry of the slot, almost
// all of it ZSCAN (BenchmarkSweepDormant).

// wakeDormantScript makes dormant alarm entries due now, each only if it is still dormant: between the
// sweep's read and this call the entry may have been claimed and leased, and a leased entry made due
// would be handed out twice.
//
// KEYS[1] alarms
// ARGV[1] now (ms), then the devices
// Reply: how many entries it made due.
var wakeDormantScript = newScript(`
local n = 0
for i = 2, #ARGV do
  local sc = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[i]))
  if sc and sc >= ${DormantAfter} then
    redis.call('ZADD', KEYS[1], ARGV[1], ARGV[i])
    n = n + 1
  end
end
return n
`)

// SweepDormant sweeps one page of slot's alarms set: a ZSCAN step from cursor reading about count
// entries, one ZMSCORE of the dormant ones in the deadlines set (and, while a doubling settles, in the
// devices' new slots), and for the devices found there a wakeDormantScript call. It returns the cursor
// of the next page (0 when the slot is done) and how many incidents it made due. A ZSCAN pass returns
// every entry present for the whole pass, so every incident dormant since a pass began is looked at by
// the end of it.
func (s *Store) SweepDormant(ctx context.Context, slot int, cursor uint64, count int) (next uint64, woken int, err error) {
	entries, next, err := s.rdb.ZScan(ctx, s.keys.alarms(slot), cursor, "", int64(count)).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("deadline: sweep slot %d: %w", slot, err)
	}
	var dormant []string
	for i := 0; i+1 < len(entries); i += 2 {
		// Scores come as Redis formats them (%.17g); an in-flight record is never dormant.
		if sc, err := strconv.ParseFloat(entries[i+1], 64); err == nil && sc >= dormantAfter {
			dormant = append(dormant, entries[i])
		}
	}
	if len(dormant) == 0 {
		return next, 0, nil
	}
	back, err := s.backInDeadlines(ctx, slot, dormant)
	if err != nil || len(back) == 0 {
		return next, 0, err
	}
	args := append([]any{s.now().UnixMilli()}, back...)
	n, err := wakeDormantScript.Run(ctx, s.rdb, []string{s.keys.alarms(slot)}, args...).Int()
	if err != nil {
		return 0, 0, fmt.Errorf("deadline: sweep slot %d: %w", slot, err)
	}
	return next, n, nil
}

// backInDeadlines returns those of devices (with an incident in slot) that are back in the deadlines
// set: they signalled since. While a doubling settles, a device's new slot is looked at too. One ZMSCORE
// per slot, one round trip.
func (s *Store) backInDeadlines(ctx context.Context, slot int, devices []string) ([]any, error) {
	if len(devices) == 0 {
		return nil, nil
	}
	layout := s.layouts.Load()
	bySlot := map[int][]int{}
	for i, dev := range devices {
		bySlot[slot] = append(bySlot[slot], i)
		if now := Slot(dev, layout.Slots); now != slot {
			bySlot[now] = append(bySlot[now], i)
		}
	}
	back := make([]bool, len(devices))
	err := s.deadlineScores(ctx, bySlot, func(i int) string { return devices[i] }, func(i int, _ float64) { back[i] = true })
	if err != nil {
		return nil, fmt.Errorf("deadline: slot %d: devices back: %w", slot, err)
	}
	return redisutil.Kept[any](devices, back), nil
}
