package history

import (
	"cmp"
	"hash/crc32"
	"strconv"

	"github.com/heartbeatd/heartbeatd/internal/config"
)

// keyspace names the history's Redis keys; no other package reads or writes them
// (docs/concepts.md#slot-layout, the key table).
type keyspace struct{ prefix string }

func newKeyspace(prefix string) keyspace {
	return keyspace{prefix: cmp.Or(prefix, config.DefaultKeyPrefix)}
}

// buckets is how many hash tags the keys are spread over: a device's bucket is crc32(device) mod 64, the
// deadline slot's rule at the default 64 slots, so the events of one claim (one slot) are one bucket's,
// written by one script call (write.go), on Redis Cluster too.
const buckets = 64

func bucketOf(device string) int { return int(crc32.ChecksumIEEE([]byte(device)) % buckets) }

// device is the STRING of one device's incidents (codec.go); it exists only while the device has one.
func (k keyspace) device(id string) string {
	return k.prefix + ":history:{" + strconv.Itoa(bucketOf(id)) + "}:" + id
}

// day is the HASH of one bucket's figures of one UTC day under one grouping (dim: "device_type" or
// "label.<name>"): field "<group value>\x00<device>" → "<down ms> <incidents opened> <open since ms>"
// (days.go).
func (k keyspace) day(bucket int, day int64, dim string) string {
	return k.prefix + ":avail:{" + strconv.Itoa(bucket) + "}:" + strconv.FormatInt(day, 10) + ":" + dim
}

// open is the HASH of one bucket's devices with an open incident by group value under one grouping:
// value → count (a field goes at 0, the key with its last field). GET /v1/stats?group_by= adds up the
// 64 buckets (OpenByGroup).
func (k keyspace) open(bucket int, dim string) string {
	return k.prefix + ":open:{" + strconv.Itoa(bucket) + "}:" + dim
}
