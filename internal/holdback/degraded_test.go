package holdback

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/testenv"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// TestDegradedSink: events go out marked "degraded" exactly while the hold-back says so for their type,
// and the caller's events are left as it built them.
func TestDegradedSink(t *testing.T) {
	at := time.UnixMilli(1_763_800_000_000)
	degraded := map[string]bool{}
	next := &testenv.EventLog{}
	sink := DegradedSink(next, func() func(string) bool { return func(typ string) bool { return degraded[typ] } })
	events := []event.Event{event.New(event.Interrupted, "d1", "default", at, at.Add(-time.Minute), at, 0),
		event.New(event.Interrupted, "m1", "meter", at, at.Add(-time.Hour), at, 0)}

	require.Len(t, sink.Publish(context.Background(), events), 2)
	degraded["meter"] = true
	require.Len(t, sink.Publish(context.Background(), events), 2)
	got := next.All()
	require.Equal(t, []bool{false, false, false, true}, []bool{got[0].Degraded, got[1].Degraded, got[2].Degraded, got[3].Degraded},
		"only the meter, and only while degraded")
	require.False(t, events[1].Degraded, "the caller's slice is not changed")
}
