package event_test

import (
	"testing"
	"time"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// BenchmarkEncode is the JSON share of a publish (BenchmarkPublish in internal/eventkafka).
func BenchmarkEncode(b *testing.B) {
	e := event.New(event.Alarm, "dev-123456", "gateway", time.Now(), time.Now().Add(-time.Minute), time.Now(), 3)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.MarshalJSON(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode is what a consumer of the events topic spends reading one event.
func BenchmarkDecode(b *testing.B) {
	e := event.New(event.Interrupted, "dev-123456", "gateway", time.Now(), time.Now().Add(-time.Minute), time.Now(), 0)
	raw, err := e.MarshalJSON()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := event.Decode(raw); err != nil {
			b.Fatal(err)
		}
	}
}
