package registry

import (
	"cmp"
	"hash/crc32"
	"strconv"

	"github.com/heartbeatd/heartbeatd/internal/config"
)

// keyspace names the registry's keys; no other package reads or writes them.
type keyspace struct{ prefix string }

func newKeyspace(prefix string) keyspace {
	return keyspace{prefix: cmp.Or(prefix, config.DefaultKeyPrefix)}
}

// registry is the HASH device → its registry value (layout.go) of device's bucket,
// <prefix>:registered:{<crc32(device) mod registryBuckets>}.
func (k keyspace) registry(device string) string {
	return k.prefix + ":registered:{" + strconv.Itoa(int(crc32.ChecksumIEEE([]byte(device))%registryBuckets)) + "}"
}

// legacyRegistry is the hash the layout before registryBuckets kept device's registration in.
func (k keyspace) legacyRegistry(device string) string {
	return k.legacyRegistryBucket(int(crc32.ChecksumIEEE([]byte(device)) % legacyRegistryBuckets))
}

// legacyRegistryBucket is the old layout's hash of bucket b: <prefix>:registry:{<b>}, JSON values.
func (k keyspace) legacyRegistryBucket(b int) string {
	return k.prefix + ":registry:{" + strconv.Itoa(b) + "}"
}
