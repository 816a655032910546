package deadline

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// FlapHistory returns, for each claim where want[i] is true, the times (unix ms, oldest first) of its
// device's last interruptions; one HMGET per slot, one round trip. Others get nil.
func (s *Store) FlapHistory(ctx context.Context, claims []Claim, want []bool) ([][]int64, error) {
	out := make([][]int64, len(claims))
	bySlot := map[int][]int{}
	for i, c := range claims {
		if want[i] {
			bySlot[c.Slot] = append(bySlot[c.Slot], i)
		}
	}
	if len(bySlot) == 0 {
		return out, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make(map[int]*redis.SliceCmd, len(bySlot))
	for slot, idx := range bySlot {
		fields := make([]string, len(idx))
		for j, i := range idx {
			fields[j] = claims[i].Device
		}
		cmds[slot] = pipe.HMGet(ctx, s.keys.Flaps(slot), fields...)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("deadline: flap history: %w", err)
	}
	for slot, idx := range bySlot {
		for j, v := range cmds[slot].Val() {
			if str, ok := v.(string); ok {
				out[idx[j]] = parseFlaps(str)
			}
		}
	}
	return out, nil
}

func parseFlaps(s string) []int64 {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		if n, err := strconv.ParseInt(f, 10, 64); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// FlapUpdate is a device's new interruption history.
type FlapUpdate struct {
	Device string
	Slot   int
	Times  []int64 // unix ms, oldest first
}

// RecordFlaps stores new interruption histories, one round trip.
func (s *Store) RecordFlaps(ctx context.Context, updates []FlapUpdate) error {
	if len(updates) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	for _, u := range updates {
		b := make([]byte, 0, 14*len(u.Times))
		for i, t := range u.Times {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, t, 10)
		}
		pipe.HSet(ctx, s.keys.Flaps(u.Slot), u.Device, string(b))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("deadline: record flaps: %w", err)
	}
	return nil
}
