package redisutil

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// FieldsByKey reads, with one HMGET per hash in one round trip, each member's field in the hash
// keyOf(i) names for members[i], and calls found with the member's index and value for each field
// present: the per-device hashes spread over buckets read in one go.
func FieldsByKey(ctx context.Context, rdb redis.Cmdable, keyOf func(i int) string, members []string, found func(i int, v string)) error {
	byKey := GroupByKey(len(members), keyOf)
	pipe := rdb.Pipeline()
	cmds := make(map[string]*redis.SliceCmd, len(byKey))
	for k, idx := range byKey {
		cmds[k] = pipe.HMGet(ctx, k, Pick[string](members, idx)...)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for k, idx := range byKey {
		for j, v := range cmds[k].Val() {
			if str, ok := v.(string); ok {
				found(idx[j], str)
			}
		}
	}
	return nil
}

// GroupByKey groups the indexes 0…n-1 by the key keyOf names for each, so one command per key serves
// them all.
func GroupByKey(n int, keyOf func(i int) string) map[string][]int {
	byKey := map[string][]int{}
	for i := range n {
		k := keyOf(i)
		byKey[k] = append(byKey[k], i)
	}
	return byKey
}

// Pick returns the members at idx, as a command's arguments.
func Pick[T string | any](members []string, idx []int) []T {
	out := make([]T, len(idx))
	for j, i := range idx {
		out[j] = any(members[i]).(T)
	}
	return out
}

// Kept returns the members whose keep is true, in order, as a command's arguments (nil for none).
func Kept[T string | any](members []string, keep []bool) []T {
	var out []T
	for i, d := range members {
		if keep[i] {
			out = append(out, any(d).(T))
		}
	}
	return out
}
