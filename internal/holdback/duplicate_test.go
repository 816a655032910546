package holdback

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// identity is the hold-back of one process (replica id, incarnation, MQTT client id) on rdb, on clock now;
// tick interval and lapse as in production (250ms, 1s).
func identity(rdb redis.UniversalClient, id, incarnation, clientID string, now func() time.Time, log *zap.Logger) *Tracker {
	return newReplicaTracker(rdb, id, now, func(o *Options) {
		o.Incarnation, o.ClientIDs, o.Logger = incarnation, []string{clientID}, log
	})
}

// startIdentity is identity on the real clock, started: a live process's entry changes at every tick.
func startIdentity(rdb redis.UniversalClient, id, incarnation, clientID string) (*Tracker, error) {
	h := identity(rdb, id, incarnation, clientID, time.Now, nil)
	return h, h.Start(context.Background())
}

func windowsEntries(t *testing.T, rdb redis.UniversalClient) map[string]string {
	t.Helper()
	all, err := rdb.HGetAll(context.Background(), newKeyspace("hb").windows()).Result()
	require.NoError(t, err)
	return all
}

// TestStartRefusesALiveReplicaOfTheSameIdentity: two processes on one host without cluster.replica_id
// get replica ids of their own (host-pid) and one MQTT client id (heartbeatd-host). While the first
// runs, the second refuses to start, naming the keys that tell them apart, and writes nothing; so does
// a process of the first one's replica id. A process of its own identity starts beside it.
func TestStartRefusesALiveReplicaOfTheSameIdentity(t *testing.T) {
	rdb, _ := holdBackRedis(t)
	running, err := startIdentity(rdb, "host-100", "i1", "heartbeatd-host")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = running.Run(ctx) }()
	defer func() { cancel(); <-done }()
	before := windowsEntries(t, rdb)
	require.Len(t, before, 1)

	_, err = startIdentity(rdb, "host-200", "i2", "heartbeatd-host")
	require.ErrorIs(t, err, ErrReplicaInUse)
	for _, want := range []string{`MQTT client id "heartbeatd-host"`, `running replica "host-100"`, "cluster.replica_id", "ingest.mqtt.client_id"} {
		require.ErrorContains(t, err, want)
	}
	_, err = startIdentity(rdb, "host-100", "i3", "heartbeatd-elsewhere")
	require.ErrorIs(t, err, ErrReplicaInUse)
	require.ErrorContains(t, err, `replica id "host-100" is in use by another running process`)
	after := windowsEntries(t, rdb)
	require.Len(t, after, 1, "the refused processes wrote no entry")
	e, ok := decodeEntry("host-100", after["host-100"])
	require.True(t, ok)
	require.Equal(t, "i1", e.incarnation, "the running process's entry is its own still")

	began := time.Now()
	_, err = startIdentity(rdb, "host-300", "i4", "heartbeatd-host-300")
	require.NoError(t, err, "another identity joins")
	require.Less(t, time.Since(began), 500*time.Millisecond, "and is not kept waiting")
}

// TestStartAfterACrashIsNotBlockedByTheDeadEntry: a process killed right after it started leaves its
// entry, as recent as a live one's. Its successor, under the same replica id or (the default replica
// id holds the pid) under another with the same client id, starts once the entry has not changed for
// four ticks (1s): it waits that long and no longer.
func TestStartAfterACrashIsNotBlockedByTheDeadEntry(t *testing.T) {
	for _, successor := range []string{"host-100", "host-200"} {
		t.Run(successor, func(t *testing.T) {
			rdb, _ := holdBackRedis(t)
			_, err := startIdentity(rdb, "host-100", "i1", "heartbeatd-host")
			require.NoError(t, err) // killed: no tick after Start's, no release
			began := time.Now()
			_, err = startIdentity(rdb, successor, "i2", "heartbeatd-host")
			require.NoError(t, err)
			took := time.Since(began)
			require.GreaterOrEqual(t, took, time.Second, "a recent entry is watched for four ticks before it counts as dead")
			require.Less(t, took, 3*time.Second)
		})
	}
}

// TestRunningReplicaLogsALiveDuplicate: a process of its client id that joined without the check at
// start (it started while this one was paused, or it is of an older version) is named in the running
// replica's log once it is seen writing, once, with the keys that end the clash. The entry a duplicate
// left when it died is never taken for one.
func TestRunningReplicaLogsALiveDuplicate(t *testing.T) {
	rdb, clk := holdBackRedis(t)
	core, logs := observer.New(zapcore.ErrorLevel)
	running := identity(rdb, "host-100", "i1", "heartbeatd-host", clk.Now, zap.New(core))
	require.NoError(t, running.Start(context.Background()))
	tick := func(hbs ...*Tracker) {
		t.Helper()
		clk.Advance(250 * time.Millisecond)
		ticks(t, hbs...)
	}

	dead := identity(rdb, "host-200", "i2", "heartbeatd-host", clk.Now, nil)
	tick(dead) // joined without Start, and died at once
	tick(running)
	tick(running)
	require.Zero(t, logs.Len(), "a duplicate's entry that does not change is no live duplicate")

	joined := identity(rdb, "host-300", "i3", "heartbeatd-host", clk.Now, nil)
	for range 3 {
		tick(joined, running)
	}
	require.Equal(t, 1, logs.Len(), "logged once per process")
	msg := logs.All()[0].Message
	for _, want := range []string{`MQTT client id "heartbeatd-host" of replica "host-100" is in use by running replica "host-300"`,
		"cluster.replica_id", "ingest.mqtt.client_id"} {
		require.Contains(t, msg, want)
	}
}
