package deadline_test

import (
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/testenv"
)

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
	eachFixture(t, 4, func(t *testing.T, f fixture) {
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
		_, err := f.Store.Register(ctx, []string{"renewed"}, []deadline.Registration{{Type: "sensor", Labels: map[string]string{"site": "new"}}}, []string{""})
		require.NoError(t, err)

		moved, err := f.Store.MigrateRegistry(ctx)
		require.NoError(t, err)
		require.Equal(t, len(old), moved)
		devices := []string{"meter-1", "own", "bare", "renewed", "sensor-9", "never"}
		registered, err := f.Store.Registered(ctx, devices)
		require.NoError(t, err)
		require.Equal(t, []bool{true, true, true, true, true, false}, registered)
		labels, err := f.Store.Labels(ctx, devices)
		require.NoError(t, err)
		require.Equal(t, []map[string]string{nil, {"site": "berlin"}, nil, {"site": "new"}, {"site": "paris", "floor": "2"}, nil}, labels)
		for dev := range old {
			require.Zero(t, f.RDB.Exists(ctx, legacyRegistryKey(dev)).Val(), "old hash of %s left", dev)
		}

		// An older replica registers a device after the move: this store, which found old data, reads it.
		require.NoError(t, f.RDB.HSet(ctx, legacyRegistryKey("late"), "late", `{"device_type":"gateway","labels":{"site":"oslo"},"registered_ms":1}`).Err())
		labels, err = f.Store.Labels(ctx, []string{"late"})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"site": "oslo"}, labels[0])
		_, err = f.Store.DeleteMany(ctx, []string{"late"})
		require.NoError(t, err)
		require.Zero(t, f.RDB.Exists(ctx, legacyRegistryKey("late")).Val())

		moved, err = f.Store.MigrateRegistry(ctx)
		require.NoError(t, err)
		require.Zero(t, moved)
		registered, err = f.Store.Registered(ctx, []string{"own", "late"})
		require.NoError(t, err)
		require.Equal(t, []bool{true, false}, registered, "late was deleted")
	})
}

// TestRegistryBucketsStayPacked: a fleet registered with a type and short labels lives in hashes Redis
// keeps packed (listpack) under its default settings, which is what keeps a registration near 34 B.
func TestRegistryBucketsStayPacked(t *testing.T) {
	eachFixture(t, 4, func(t *testing.T, f fixture) {
		ctx := t.Context()
		const n = 20_000
		ids := make([]string, n)
		regs := make([]deadline.Registration, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("device-%08d", i)
			regs[i] = deadline.Registration{Type: "gateway", Labels: map[string]string{"site": "b7"}}
		}
		_, err := f.Store.Register(ctx, ids, regs, make([]string, n))
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

// TestRegisterExpectsOnlyDevicesRedisDoesNotKnow: an import expects the devices Redis knows nothing of
// (their deadline one timeout after the registration), also past the 500 devices one step of the script
// takes per slot; a device with a deadline keeps it, and an interrupted one stays interrupted.
func TestRegisterExpectsOnlyDevicesRedisDoesNotKnow(t *testing.T) {
	eachFixture(t, 4, func(t *testing.T, f fixture) {
		ctx := t.Context()
		t0 := f.Clock.Now()
		f.Refresh(t, deadline.Signal{Device: "known", Type: "gateway", Seen: t0}, deadline.Signal{Device: "down", Type: "gateway", Seen: t0})
		f.Clock.Advance(31 * time.Second)
		f.Refresh(t, deadline.Signal{Device: "known", Type: "gateway", Seen: f.Clock.Now()})
		require.Len(t, f.ClaimAll(t, deadline.ClaimOptions{Lease: time.Minute}).Claims, 1)
		knownBefore, _ := f.device(t, "known")

		ids := append(testenv.DeviceIDs("new", 2500), "known", "down")
		regs := make([]deadline.Registration, len(ids))
		for i := range regs {
			regs[i] = deadline.Registration{Type: "gateway"}
		}
		added, err := f.Store.Register(ctx, ids, regs, make([]string, len(ids)))
		require.NoError(t, err)
		require.Equal(t, 2500, added)
		for _, id := range ids[:2500] {
			d, found := f.device(t, id)
			require.True(t, found, id)
			require.Equal(t, f.Clock.Now().Add(30*time.Second), d.Deadline, id)
		}
		known, _ := f.device(t, "known")
		require.Equal(t, knownBefore.Deadline, known.Deadline)
		down, _ := f.device(t, "down")
		require.NotNil(t, down.Incident, "still interrupted")
		_, err = f.RDB.ZScore(ctx, f.Store.Keys().Deadlines(deadline.Slot("down", 4)), "down").Result()
		require.ErrorIs(t, err, redis.Nil, "an interrupted device is not expected anew")
	})
}
