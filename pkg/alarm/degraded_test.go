package alarm

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

type keepSink struct{ got []event.Event }

func (s *keepSink) Publish(_ context.Context, events []event.Event) []error {
	s.got = append(s.got, events...)
	return make([]error, len(events))
}

// TestDegradedSink: events go out marked "degraded" exactly while the hold-back says so, and the caller's
// events are left as it built them.
func TestDegradedSink(t *testing.T) {
	at := time.UnixMilli(1_763_800_000_000)
	degraded := false
	next := &keepSink{}
	sink := DegradedSink(next, func() bool { return degraded })
	events := []event.Event{event.New(event.Interrupted, "d1", "default", at, at.Add(-time.Minute), at, 0)}

	require.Len(t, sink.Publish(context.Background(), events), 1)
	degraded = true
	require.Len(t, sink.Publish(context.Background(), events), 1)
	require.False(t, next.got[0].Degraded)
	require.True(t, next.got[1].Degraded)
	require.False(t, events[0].Degraded, "the caller's slice is not changed")
}
