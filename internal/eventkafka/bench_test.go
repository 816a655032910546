package eventkafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/heartbeatd/heartbeatd/internal/eventkafka"
)

// BenchmarkPublish measures synchronous publishes of one batch at a time, the way the alarm loop
// publishes, into an in-process cluster. The batch_timeout=1ms cases keep the evidence for the 10µs
// default (see PublisherOptions.BatchTimeout).
func BenchmarkPublish(b *testing.B) {
	for _, bc := range []struct {
		name         string
		batch        int
		brokers      int
		batchTimeout time.Duration
	}{
		{"batch=1000/brokers=1", 1000, 1, 0},
		{"batch=1000/brokers=3", 1000, 3, 0},
		{"batch=256/brokers=3", 256, 3, 0},
		{"batch=1/brokers=3", 1, 3, 0},
		{"batch=1000/brokers=3/batch_timeout=1ms", 1000, 3, time.Millisecond},
		{"batch=256/brokers=3/batch_timeout=1ms", 256, 3, time.Millisecond},
		{"batch=1/brokers=3/batch_timeout=1ms", 1, 3, time.Millisecond},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := startKafka(b, kfake.NumBrokers(bc.brokers))
			p := newPublisher(b, eventkafka.PublisherOptions{Brokers: c.ListenAddrs(), BatchTimeout: bc.batchTimeout})
			events := makeEvents(bc.batch, bc.batch, time.Now())
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			published := 0
			for b.Loop() {
				for i, err := range p.Publish(ctx, events) {
					if err != nil {
						b.Fatalf("event %d: %v", i, err)
					}
				}
				published += len(events)
			}
			b.ReportMetric(float64(published)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
