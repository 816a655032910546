package parents

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// After a data loss the links mark <prefix>:parents:any 1 (allNamed): the named-parents sets may miss
// parents whose links survived. Left so, every later gateway storm wakes every device's children for
// good. RepairNamedParents, run by the sweepers, names the parent of every surviving link again and
// then marks the sets complete, so a storm costs what it did before the loss. One replica at a time
// (<prefix>:parents:repair, a lease of repairLease); a link written meanwhile names its parent itself.

// repairLease bounds how long one replica holds the repair: one that dies leaves it to another after it.
const repairLease = time.Minute

// repairPage is how many links one HSCAN step of a bucket reads.
const repairPage = 1000

// markNamedScript marks the sets complete only if the mark still says they may not be (1): an older
// replica that wrote 1 again meanwhile keeps the fleet on the safe path.
//
// KEYS[1] parents:any  ARGV[1] parentsNamed
var markNamedScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == '1' then
  redis.call('SET', KEYS[1], ARGV[1])
  return 1
end
return 0`)

// RepairNamedParents names the parent of every link again when the mark says the sets may be
// incomplete; it reports whether it marked them complete. Nothing to do costs one GET.
func (l *Links) RepairNamedParents(ctx context.Context) (bool, error) {
	v, err := l.rdb.Get(ctx, l.keys.inUse()).Result()
	if errors.Is(err, redis.Nil) || (err == nil && v != "1") {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("parents: parents in use: %w", err)
	}
	got, err := l.rdb.SetNX(ctx, l.keys.repair(), l.now().UnixMilli(), repairLease).Result()
	if err != nil || !got {
		return false, err
	}
	defer l.rdb.Del(context.WithoutCancel(ctx), l.keys.repair())
	for b := range parentBuckets {
		key := l.keys.parentsBucket(b)
		for cursor := uint64(0); ; {
			links, next, err := l.rdb.HScan(ctx, key, cursor, "", repairPage).Result()
			if err != nil {
				return false, fmt.Errorf("parents: repair named parents: %w", err)
			}
			pipe := l.rdb.Pipeline()
			for i := 1; i < len(links); i += 2 {
				pipe.SAdd(ctx, l.keys.namedParents(links[i]), links[i])
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return false, fmt.Errorf("parents: repair named parents: %w", err)
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	marked, err := markNamedScript.Run(ctx, l.rdb, []string{l.keys.inUse()}, parentsNamed).Int()
	if err != nil {
		return false, fmt.Errorf("parents: mark named parents: %w", err)
	}
	l.namedChecked.Store(0)
	return marked == 1, nil
}
