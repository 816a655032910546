package eventkafka_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/heartbeatd/heartbeatd/internal/eventkafka"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// A topic that takes at most 2000 bytes per produce batch refuses one oversized event for its content;
// the events written in the same batch as it, and a batch larger than the limit made of small events,
// are delivered, each sent again on its own.
func TestPublishRefusesOnlyTheEventKafkaRefuses(t *testing.T) {
	c := startKafka(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "2000"}))
	p := newPublisher(t, eventkafka.PublisherOptions{Brokers: c.ListenAddrs()})
	at := time.Now()
	poison := event.New(event.Interrupted, "dev-"+strings.Repeat("x", 3000), "", at, at.Add(-time.Minute), at, 0)
	// One device, so one partition and one produce batch of ≈ 8 kB: over the limit as a whole.
	events := makeEvents(20, 1, at)
	events = append(events[:10], append([]event.Event{poison}, events[10:]...)...)

	errs := p.Publish(context.Background(), events)
	require.Len(t, errs, len(events))
	for i, err := range errs {
		if i == 10 {
			require.Error(t, err)
			require.True(t, eventkafka.Refused(err), "refused for its content: %v", err)
			require.ErrorContains(t, err, "Message Size Too Large")
			continue
		}
		require.NoError(t, err, "event %d", i)
	}
	recs := readAll(t, c.ListenAddrs(), eventsTopic, len(events)-1)
	require.Len(t, recs, len(events)-1)
	for i, r := range recs {
		e, err := event.Decode(r.Value)
		require.NoError(t, err)
		require.Equal(t, makeEvents(20, 1, at)[i], e, "in order")
	}
}

func TestPublishUnencodableEventIsRefused(t *testing.T) {
	c := startKafka(t)
	p := newPublisher(t, eventkafka.PublisherOptions{Brokers: c.ListenAddrs()})
	errs := p.Publish(context.Background(), []event.Event{{}})
	require.True(t, eventkafka.Refused(errs[0]), "%v", errs[0])
}

// A broker that is gone says nothing about the events: never a refusal, so nothing is parked for it.
func TestPublishBrokerDownIsNotARefusal(t *testing.T) {
	c := startKafka(t)
	p := newPublisher(t, eventkafka.PublisherOptions{Brokers: c.ListenAddrs(), WriteTimeout: 500 * time.Millisecond})
	events := makeEvents(4, 2, time.Now())
	requireAllNil(t, p.Publish(context.Background(), events))
	c.Close()
	for i, err := range p.Publish(context.Background(), events) {
		require.Error(t, err, "event %d", i)
		require.False(t, eventkafka.Refused(err), "event %d: %v", i, err)
	}
}
