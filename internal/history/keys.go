package history

import (
	"strconv"

	"github.com/heartbeatd/heartbeatd/internal/config"
)

// keyspace names the history's Redis keys; no other package reads or writes them
// (docs/concepts.md#slot-layout, the key table).
type keyspace struct{ prefix string }

func newKeyspace(prefix string) keyspace {
	if prefix == "" {
		prefix = config.DefaultKeyPrefix
	}
	return keyspace{prefix: prefix}
}

// device is the STRING of one device's incidents (codec.go); it exists only while the device has one.
// Each call touches one such key, so no hash tag is needed on Redis Cluster.
func (k keyspace) device(id string) string { return k.prefix + ":history:" + id }

// day is the HASH of one UTC day's figures under one grouping (dim: "device_type" or "label.<name>"):
// field "<group value>\x00<device>" → "<down ms> <incidents opened> <open since ms>" (days.go).
func (k keyspace) day(day int64, dim string) string {
	return k.prefix + ":avail:" + strconv.FormatInt(day, 10) + ":{" + dim + "}"
}
