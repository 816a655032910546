package event

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type refusingSink struct{ refuse string }

func (s refusingSink) Publish(_ context.Context, events []Event) []error {
	errs := make([]error, len(events))
	for i, e := range events {
		if e.DeviceID == s.refuse {
			errs[i] = errors.New("refused")
		}
	}
	return errs
}

type recordingObserver struct{ seen []string }

func (o *recordingObserver) Observe(events []Event) {
	for _, e := range events {
		o.seen = append(o.seen, e.DeviceID)
	}
}

// TestObservedSeesOnlyAcknowledged: observers follow Kafka, so an event Kafka refused is not shown to
// them (it will be published, and observed, again).
func TestObservedSeesOnlyAcknowledged(t *testing.T) {
	at := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	var a, b recordingObserver
	sink := Observed(refusingSink{refuse: "d2"}, &a, &b)
	errs := sink.Publish(context.Background(), []Event{
		New(Interrupted, "d1", "", at, at, at, 0), New(Interrupted, "d2", "", at, at, at, 0), New(Interrupted, "d3", "", at, at, at, 0),
	})
	require.NoError(t, errs[0])
	require.Error(t, errs[1])
	require.Equal(t, []string{"d1", "d3"}, a.seen)
	require.Equal(t, []string{"d1", "d3"}, b.seen)
}
