package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// How the registry is laid out in Redis, and the move from the layout before it.
//
// A registration is one field of one of registryBuckets small hashes, <prefix>:registered:{<bucket>},
// bucket = crc32(device) mod registryBuckets. Redis keeps a hash of at most hash-max-listpack-entries
// (512 by default) fields of at most hash-max-listpack-value (64) bytes as one packed allocation, about
// the field's and the value's lengths plus 4 bytes, where a larger hash pays ≈ 90 B more per field for
// its table entry and two allocations. 2^17 buckets hold 10M devices at 76 per bucket on average, so
// even a server lowered to 128 entries keeps every bucket packed up to ≈ 10M registered devices (a
// bucket past 128 is then a six-sigma event), and the default up to ≈ 50M; beyond, the fuller buckets
// turn into tables: correct, ≈ 90 B per device more.
// A device id or a value longer than 64 bytes (labels) turns its own bucket into a table the same way.
//
// The value holds the labels only (registryValue): the type is folded into the device's deadline and an
// own timeout lives in the overrides table, and nothing reads the registration time the old JSON held.
//
// Before, the registry was 64 hashes <prefix>:registry:{<bucket>} of JSON values, each holding 1/64 of
// the fleet as a table (≈ 136 B per device against ≈ 34 B now). Migrate moves them at start-up;
// until a replica started on a store without them, it also reads them for devices the new buckets lack
// (an older replica may write there during a rolling upgrade) and deletes there what it replaces.

// registryBuckets is how many hashes hold the registry (see above).
const registryBuckets = 1 << 17

// legacyRegistryBuckets is how many hashes the registry before registryBuckets used.
const legacyRegistryBuckets = 64

// registrySep starts a value with labels, which tells it from the old layout's JSON ('{' first).
const registrySep = "\x1f"

// registryEntry is what the registry holds of a registered device.
type registryEntry struct {
	labels map[string]string // nil: none
}

// registryValue is what the registry stores of a registration with labels: "" without labels, else
// registrySep followed by the labels as JSON. The old layout's values are JSON objects ('{' first).
func registryValue(labels map[string]string) (string, error) {
	if len(labels) == 0 {
		return "", nil
	}
	b, err := json.Marshal(labels)
	if err != nil {
		return "", err
	}
	return registrySep + string(b), nil
}

// parseRegistryValue reads a registry value of either layout.
func parseRegistryValue(v string) (registryEntry, error) {
	var e registryEntry
	switch {
	case v == "":
		return e, nil
	case strings.HasPrefix(v, registrySep):
		err := json.Unmarshal([]byte(v[len(registrySep):]), &e.labels)
		return e, err
	}
	var old struct { // the old layout's JSON; its type and timeout are kept elsewhere too (Registration)
		Labels map[string]string `json:"labels"`
	}
	err := json.Unmarshal([]byte(v), &old)
	e.labels = old.Labels
	return e, err
}

// migratePage bounds the fields one step of Migrate reads and moves.
const migratePage = 1000

// Migrate moves registrations of the old layout into the current one, a page at a time, and
// returns how many it moved. A registration the current layout already holds (written since) is kept;
// the old field is deleted once its page is written. Until a call finds nothing to move, the registry
// also reads the old hashes (see above). It runs in daemon start-up, after the deadline store's
// SyncLayout.
func (r *Registry) Migrate(ctx context.Context) (int, error) {
	r.legacy.Store(true)
	moved := 0
	found := false
	for b := range legacyRegistryBuckets {
		key := r.keys.legacyRegistryBucket(b)
		var cursor uint64
		for {
			fields, next, err := r.rdb.HScan(ctx, key, cursor, "", migratePage).Result()
			if err != nil {
				return moved, fmt.Errorf("registry: migrate: %w", err)
			}
			found = found || len(fields) > 0
			n, err := r.moveRegistrations(ctx, key, fields)
			moved += n
			if err != nil {
				return moved, err
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	r.legacy.Store(found)
	return moved, nil
}

// moveRegistrations writes the old layout's field, value pairs of key into the current layout (where
// absent) and deletes them from key, in one round trip.
func (r *Registry) moveRegistrations(ctx context.Context, key string, fields []string) (int, error) {
	if len(fields) == 0 {
		return 0, nil
	}
	pipe := r.rdb.Pipeline()
	devices := make([]string, 0, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		dev := fields[i]
		devices = append(devices, dev)
		e, err := parseRegistryValue(fields[i+1])
		if err != nil {
			continue // unreadable before as after: dropped with the old hash
		}
		v, err := registryValue(e.labels)
		if err != nil {
			continue
		}
		pipe.HSetNX(ctx, r.keys.registry(dev), dev, v)
	}
	pipe.HDel(ctx, key, devices...)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("registry: migrate: %w", err)
	}
	return len(devices), nil
}
