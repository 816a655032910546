package event

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A watchdog event names its replica as device and key, carries one id per tick, and decodes as any event.
func TestWatchdogEvent(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 30, 12_345_678, time.FixedZone("CET", 3600))
	e := NewWatchdog("replica-a", at)
	b, err := e.MarshalJSON()
	require.NoError(t, err)
	require.JSONEq(t, `{"schema":"heartbeatd.event/v1","id":"watchdog/replica-a/1795338030012","kind":"watchdog",
		"device_id":"replica-a","device_type":"","last_seen":null,"deadline":null,"at":"2026-11-22T09:00:30.012Z",
		"silent_for_ms":0,"repeat":0}`, string(b))
	got, err := Decode(b)
	require.NoError(t, err)
	require.Equal(t, e, got)
	require.True(t, got.Kind.Valid())
	require.NotEqual(t, e.ID, NewWatchdog("replica-a", at.Add(time.Millisecond)).ID, "one id per tick")
	require.NotEqual(t, e.ID, NewWatchdog("replica-b", at).ID, "one id per replica")
}
