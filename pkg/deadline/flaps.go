package deadline

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// FlapHistory returns, for each claim where want[i] is true, the times (unix ms, oldest first) of its
// device's last interruptions; one HMGET per slot, one round trip. Others get nil.
func (s *Store) FlapHistory(ctx context.Context, claims []Claim, want []bool) ([][]int64, error) {
	out := make([][]int64, len(claims))
	var idx []int // idx[j]: the claim of devices[j]
	var devices []string
	for i, c := range claims {
		if want[i] {
			idx = append(idx, i)
			devices = append(devices, c.Device)
		}
	}
	if len(devices) == 0 {
		return out, nil
	}
	keyOf := func(j int) string { return s.keys.flaps(claims[idx[j]].Slot) }
	err := s.fieldsByDevice(ctx, keyOf, devices, func(j int, v string) { out[idx[j]] = parseFlaps(v) })
	if err != nil {
		return nil, fmt.Errorf("deadline: flap history: %w", err)
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
		pipe.HSet(ctx, s.keys.flaps(u.Slot), u.Device, string(b))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("deadline: record flaps: %w", err)
	}
	return nil
}
