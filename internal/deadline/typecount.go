package deadline

import (
	"context"
	"fmt"
	"strconv"

	"github.com/heartbeatd/heartbeatd/internal/loop"
)

// typeCountScan is the COUNT hint of each SCAN call of CountTypesIn: large enough that a slot of a big
// fleet takes few round trips, small enough that no call holds Redis for long.
const typeCountScan = 1000

// CountTypesIn counts the online devices (deadlines set) and the open incidents of each type in slots:
// CountOnlineIn and CountIncidentsIn.
func (s *Store) CountTypesIn(ctx context.Context, slots []int, pace loop.Pacer) (online, interrupted map[string]int64, err error) {
	if online, err = s.CountOnlineIn(ctx, slots, pace); err != nil {
		return nil, nil, err
	}
	if interrupted, err = s.CountIncidentsIn(ctx, slots, pace); err != nil {
		return nil, nil, err
	}
	return online, interrupted, nil
}

// CountOnlineIn counts the online devices (deadlines set) of each type in slots. It scans every one of
// them (ZSCAN, never blocking Redis), so it costs O(devices in slots); pace spreads it so it keeps Redis
// busy at most its share of the time (the zero Pacer: as fast as it goes).
func (s *Store) CountOnlineIn(ctx context.Context, slots []int, pace loop.Pacer) (map[string]int64, error) {
	byIdx := map[int]int64{}
	for _, slot := range slots {
		if err := s.scanSlot(ctx, slot, false, pace, func(_, v string) {
			score, _ := strconv.ParseFloat(v, 64)
			_, idx := scoreDeadline(score)
			byIdx[idx]++
		}); err != nil {
			return nil, err
		}
	}
	return s.namedCounts(ctx, byIdx), nil
}

// CountIncidentsIn counts the open incidents of each type in slots (HSCAN of their state hashes): it
// costs O(incidents in slots), paced as CountOnlineIn.
func (s *Store) CountIncidentsIn(ctx context.Context, slots []int, pace loop.Pacer) (map[string]int64, error) {
	byIdx := map[int]int64{}
	for _, slot := range slots {
		if err := s.scanSlot(ctx, slot, true, pace, func(field, v string) {
			if field == stateGuardField {
				return
			}
			if st, err := decodeState(v); err == nil {
				byIdx[st.TypeIndex]++
			}
		}); err != nil {
			return nil, err
		}
	}
	return s.namedCounts(ctx, byIdx), nil
}

// namedCounts names counts by type index; devices with their own timeout count under their type.
func (s *Store) namedCounts(ctx context.Context, byIdx map[int]int64) map[string]int64 {
	out := make(map[string]int64, len(byIdx))
	for idx, n := range byIdx {
		typ, _ := s.typeOf(ctx, idx)
		out[typ] += n
	}
	return out
}

// scanSlot calls each for every member and score of slot's deadlines set, or every field and value of
// its state hash (incidents).
func (s *Store) scanSlot(ctx context.Context, slot int, incidents bool, pace loop.Pacer, each func(member, value string)) error {
	var cur uint64
	for {
		var kv []string
		err := pace.Step(ctx, func() (err error) {
			if incidents {
				kv, cur, err = s.rdb.HScan(ctx, s.keys.state(slot), cur, "", typeCountScan).Result()
			} else {
				kv, cur, err = s.rdb.ZScan(ctx, s.keys.Deadlines(slot), cur, "", typeCountScan).Result()
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("deadline: count types in slot %d: %w", slot, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			each(kv[i], kv[i+1])
		}
		if cur == 0 {
			return nil
		}
	}
}
