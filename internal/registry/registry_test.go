package registry_test

import (
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/internal/testenv/deadlinetest"
)

// TestMain stops the Redis Cluster the tests share (see testenv.RedisBackends).
func TestMain(m *testing.M) { testenv.Main(m) }

// eachStore runs test once per Redis backend on an empty Redis with a deadline store of 4 slots, whose
// registrations write the registry (deadline.Store.Register).
func eachStore(t *testing.T, test func(t *testing.T, f *deadlinetest.Fixture)) {
	t.Helper()
	timeouts := testenv.TypeTimeouts(map[string]time.Duration{"default": time.Minute, "gateway": 30 * time.Second, "sensor": 10 * time.Minute})
	deadlinetest.Each(t, deadline.Options{Slots: 4, Timeout: timeouts}, []string{"default", "gateway", "sensor"}, test)
}

// legacyRegistryKey is the hash the registry's previous layout (64 hashes of JSON) kept device in.
func legacyRegistryKey(device string) string {
	return fmt.Sprintf("%s:registry:{%d}", config.DefaultKeyPrefix, crc32.ChecksumIEEE([]byte(device))%64)
}

// TestRegistryOfThePreviousLayoutIsMigrated: registrations a previous version wrote (64 hashes of JSON)
// are read as before once a replica of this version started: registered (retention spares them) with
// their labels; one registered anew since keeps its new labels; the old hashes are gone; registrations an
// older replica still writes during the rolling upgrade are read, and a deleted device loses them. (The
// type and own timeout the old JSON repeated live in the deadline and the overrides table.)
func TestRegistryOfThePreviousLayoutIsMigrated(t *testing.T) {
	eachStore(t, func(t *testing.T, f *deadlinetest.Fixture) {
		ctx := t.Context()
		old := map[string]string{
			"meter-1":  `{"device_type":"gateway","registered_ms":1763800000000}`,
			"own":      `{"device_type":"gateway","timeout_ms":90000,"labels":{"site":"berlin"},"registered_ms":1763800000000}`,
			"bare":     `{"registered_ms":1763800000000}`,
			"renewed":  `{"device_type":"gateway","labels":{"site":"old"},"registered_ms":1763800000000}`,
			"sensor-9": `{"device_type":"sensor","labels":{"site":"paris","floor":"2"},"registered_ms":1763800000000}`,
		}
		for dev, v := range old {
			require.NoError(t, f.RDB.HSet(ctx, legacyRegistryKey(dev), dev, v).Err())
		}
		_, _, err := f.Store.Register(ctx, []string{"renewed"}, []deadline.Registration{{Type: "sensor", Labels: map[string]string{"site": "new"}}}, []string{""})
		require.NoError(t, err)

		moved, err := f.Store.Registry().Migrate(ctx)
		require.NoError(t, err)
		require.Equal(t, len(old), moved)
		devices := []string{"meter-1", "own", "bare", "renewed", "sensor-9", "never"}
		registered, err := f.Store.Registry().Registered(ctx, devices)
		require.NoError(t, err)
		require.Equal(t, []bool{true, true, true, true, true, false}, registered)
		labels, err := f.Store.Registry().Labels(ctx, devices)
		require.NoError(t, err)
		require.Equal(t, []map[string]string{nil, {"site": "berlin"}, nil, {"site": "new"}, {"site": "paris", "floor": "2"}, nil}, labels)
		for dev := range old {
			require.Zero(t, f.RDB.Exists(ctx, legacyRegistryKey(dev)).Val(), "old hash of %s left", dev)
		}

		// An older replica registers a device after the move: this store, which found old data, reads it.
		require.NoError(t, f.RDB.HSet(ctx, legacyRegistryKey("late"), "late", `{"device_type":"gateway","labels":{"site":"oslo"},"registered_ms":1}`).Err())
		labels, err = f.Store.Registry().Labels(ctx, []string{"late"})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"site": "oslo"}, labels[0])
		_, err = f.Store.Delete(ctx, "late")
		require.NoError(t, err)
		require.Zero(t, f.RDB.Exists(ctx, legacyRegistryKey("late")).Val())

		moved, err = f.Store.Registry().Migrate(ctx)
		require.NoError(t, err)
		require.Zero(t, moved)
		registered, err = f.Store.Registry().Registered(ctx, []string{"own", "late"})
		require.NoError(t, err)
		require.Equal(t, []bool{true, false}, registered, "late was deleted")
	})
}

// TestRegistryBucketsStayPacked: a fleet registered with a type and short labels lives in hashes Redis
// keeps packed (listpack) under its default settings, which is what keeps a registration near 34 B.
func TestRegistryBucketsStayPacked(t *testing.T) {
	eachStore(t, func(t *testing.T, f *deadlinetest.Fixture) {
		ctx := t.Context()
		const n = 20_000
		ids := make([]string, n)
		regs := make([]deadline.Registration, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("device-%08d", i)
			regs[i] = deadline.Registration{Type: "gateway", Labels: map[string]string{"site": "b7"}}
		}
		_, _, err := f.Store.Register(ctx, ids, regs, make([]string, n))
		require.NoError(t, err)
		keys := map[string]bool{}
		for _, dev := range ids[:200] {
			keys[fmt.Sprintf("%s:registered:{%d}", config.DefaultKeyPrefix, crc32.ChecksumIEEE([]byte(dev))%(1<<17))] = true
		}
		for k := range keys {
			enc, err := f.RDB.ObjectEncoding(ctx, k).Result()
			require.NoError(t, err, k)
			require.Equal(t, "listpack", enc, k)
		}
	})
}
