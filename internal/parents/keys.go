package parents

import (
	"cmp"
	"hash/crc32"
	"strconv"

	"github.com/heartbeatd/heartbeatd/internal/config"
)

// keyspace names the parent links' keys; no other package reads or writes them.
type keyspace struct{ prefix string }

func newKeyspace(prefix string) keyspace {
	return keyspace{prefix: cmp.Or(prefix, config.DefaultKeyPrefix)}
}

// parentBuckets is how many hashes the child → parent links are spread over.
const parentBuckets = 64

// parents is the HASH child → parent of child's bucket.
func (k keyspace) parents(child string) string { return k.prefix + ":parents:" + bucket(child) }

// parentsBucket is the links hash of bucket b (parents(child) is one of them).
func (k keyspace) parentsBucket(b int) string { return k.prefix + ":parents:" + bucketTag(b) }

// bucket is the hash tag "{crc32(device) mod parentBuckets}" of the per-device hashes kept apart from
// the slots (parent links).
func bucket(device string) string {
	return bucketTag(int(crc32.ChecksumIEEE([]byte(device)) % parentBuckets))
}

func bucketTag(b int) string { return "{" + strconv.Itoa(b) + "}" }

// children is the SET of the devices that named parent as theirs.
func (k keyspace) children(parent string) string { return k.prefix + ":children:{" + parent + "}" }

// inUse is the STRING that exists once any link was written; parentsNamed or 1 (named.go).
func (k keyspace) inUse() string { return k.prefix + ":parents:any" }

// namedParents is the SET of the parents some device's link names, of parent's bucket (named.go).
func (k keyspace) namedParents(parent string) string {
	return k.prefix + ":parents:named:" + bucket(parent)
}

// verdicts is the counter of parents' verdicts (named.go).
func (k keyspace) verdicts() string { return k.prefix + ":parents:verdicts" }

// repair is the lease of the replica repairing the named-parents sets (repair.go).
func (k keyspace) repair() string { return k.prefix + ":parents:repair" }
