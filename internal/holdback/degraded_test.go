package holdback

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

// TestDegradedSink: events go out marked "degraded" exactly while the hold-back says so for their type,
// and the caller's events are left as it built them.
func TestDegradedSink(t *testing.T) {
	at := time.UnixMilli(1_763_800_000_000)
	degraded := map[string]bool{}
	next := &keepSink{}
	sink := DegradedSink(next, func() func(string) bool { return func(typ string) bool { return degraded[typ] } })
	events := []event.Event{event.New(event.Interrupted, "d1", "default", at, at.Add(-time.Minute), at, 0),
		event.New(event.Interrupted, "m1", "meter", at, at.Add(-time.Hour), at, 0)}

	require.Len(t, sink.Publish(context.Background(), events), 2)
	degraded["meter"] = true
	require.Len(t, sink.Publish(context.Background(), events), 2)
	require.Equal(t, []bool{false, false, false, true}, []bool{next.got[0].Degraded, next.got[1].Degraded, next.got[2].Degraded,
		next.got[3].Degraded}, "only the meter, and only while degraded")
	require.False(t, events[1].Degraded, "the caller's slice is not changed")
}
