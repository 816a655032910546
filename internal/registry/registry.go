package registry

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/heartbeatd/heartbeatd/internal/redisutil"
)

// Registry is the device registry's entries on one Redis (standalone or Cluster).
type Registry struct {
	rdb  redis.UniversalClient
	keys keyspace
	// legacy says whether the old layout's hashes may still hold registrations (layout.go).
	legacy atomic.Bool
}

// New returns the registry on rdb under prefix (config redis.key_prefix; "" = its default).
func New(rdb redis.UniversalClient, prefix string) *Registry {
	return &Registry{rdb: rdb, keys: newKeyspace(prefix)}
}

// Queue queues device's registry entry with labels in pipe (replacing one of the old layout); it fails,
// queueing nothing, when the labels cannot be stored.
func (r *Registry) Queue(ctx context.Context, pipe redis.Pipeliner, device string, labels map[string]string) error {
	v, err := registryValue(labels)
	if err != nil {
		return err
	}
	pipe.HSet(ctx, r.keys.registry(device), device, v)
	if r.legacy.Load() {
		pipe.HDel(ctx, r.keys.legacyRegistry(device), device)
	}
	return nil
}

// QueueDelete queues the deletion of device's registry entry, of either layout, in pipe.
func (r *Registry) QueueDelete(ctx context.Context, pipe redis.Pipeliner, device string) {
	pipe.HDel(ctx, r.keys.registry(device), device)
	if r.legacy.Load() {
		pipe.HDel(ctx, r.keys.legacyRegistry(device), device)
	}
}

// entries returns each device's registry entry (nil when it is not registered), one round trip,
// and another for those the current layout lacks while the old one may hold some (layout.go).
func (r *Registry) entries(ctx context.Context, devices []string) ([]*registryEntry, error) {
	out := make([]*registryEntry, len(devices))
	if len(devices) == 0 {
		return out, nil
	}
	found := func(i int, v string) {
		if e, err := parseRegistryValue(v); err == nil {
			out[i] = &e
		}
	}
	if err := redisutil.FieldsByKey(ctx, r.rdb, func(i int) string { return r.keys.registry(devices[i]) }, devices, found); err != nil {
		return nil, fmt.Errorf("registry: registrations: %w", err)
	}
	if !r.legacy.Load() {
		return out, nil
	}
	var missing []int
	for i, e := range out {
		if e == nil {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	ids := make([]string, len(missing))
	for j, i := range missing {
		ids[j] = devices[i]
	}
	keyOf := func(j int) string { return r.keys.legacyRegistry(ids[j]) }
	if err := redisutil.FieldsByKey(ctx, r.rdb, keyOf, ids, func(j int, v string) { found(missing[j], v) }); err != nil {
		return nil, fmt.Errorf("registry: registrations: %w", err)
	}
	return out, nil
}

// Registered reports for each device whether it is registered, one round trip (two while the old
// layout may hold some).
func (r *Registry) Registered(ctx context.Context, devices []string) ([]bool, error) {
	entries, err := r.entries(ctx, devices)
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(devices))
	for i, e := range entries {
		out[i] = e != nil
	}
	return out, nil
}

// Labels returns each device's registered labels (nil when none).
func (r *Registry) Labels(ctx context.Context, devices []string) ([]map[string]string, error) {
	entries, err := r.entries(ctx, devices)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]string, len(devices))
	for i, e := range entries {
		if e != nil {
			out[i] = e.labels
		}
	}
	return out, nil
}
