// Package redisutil holds the Redis operations that are not about any one key family: each package that
// owns keys (internal/deadline, internal/silence, …) calls them on its own keys.
package redisutil

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// setMissingScript writes each field the hash lacks, leaving those it holds as they are.
//
// KEYS[1] hash  ARGV field, value, field, value, …
// Reply: how many fields were written.
var setMissingScript = redis.NewScript(`
local n = 0
for i = 1, #ARGV, 2 do
  n = n + redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1])
end
return n
`)

// setMissingPairs bounds the fields one setMissingScript call writes, so a large write-back does not
// hold Redis for long.
const setMissingPairs = 1024

// SetMissing writes back into hash key each field of pairs (field, value, field, value, …) that it
// lacks, leaving what it holds (written since a loss) as it is: how every store writes back what Redis
// lost (internal/deadline/datalost.go). It returns how many fields it wrote.
func SetMissing(ctx context.Context, rdb redis.Scripter, key string, pairs []any) (int64, error) {
	var written int64
	for len(pairs) > 0 {
		chunk := pairs[:min(len(pairs), 2*setMissingPairs)]
		pairs = pairs[len(chunk):]
		n, err := setMissingScript.Run(ctx, rdb, []string{key}, chunk...).Int64()
		if err != nil {
			return written, err
		}
		written += n
	}
	return written, nil
}
