package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// EndOffsets is, for each partition of topic, the offset its next record will take (its high-water
// mark), asked with a client independent of the code under test.
func (k *Kafka) EndOffsets(tb testing.TB, topic string) map[int32]int64 {
	tb.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range k.Partitions(tb, topic)[topic] {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = int32(p), -1 // -1: the latest offset
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	res, err := req.RequestWith(context.Background(), k.Client(tb)) // split among the leaders and merged
	if err != nil {
		tb.Fatalf("testenv: kafka end offsets of %s: %v", topic, err)
	}
	ends := map[int32]int64{}
	for _, t := range res.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				tb.Fatalf("testenv: kafka end offset of %s[%d]: error code %d", topic, p.Partition, p.ErrorCode)
			}
			ends[p.Partition] = p.Offset
		}
	}
	return ends
}

// ReadToEnd reads topic from its start until it has every record appended before the call (each
// partition up to its end offset then), or timeout passes. A short read fails tb: a judgement of part
// of a run would pass for a judgement of all of it.
func (k *Kafka) ReadToEnd(tb testing.TB, topic string, timeout time.Duration) []Record {
	tb.Helper()
	ends := k.EndOffsets(tb, topic)
	next := map[int32]int64{}
	seen := 0
	done := func(recs []Record) bool {
		for _, r := range recs[seen:] {
			next[r.Partition] = max(next[r.Partition], r.Offset+1)
		}
		seen = len(recs)
		for p, end := range ends {
			if next[p] < end {
				return false
			}
		}
		return true
	}
	out, lastErr := k.read(tb, topic, timeout, done)
	if !done(out) {
		tb.Errorf("testenv: read %s to its end offsets %v: reached %v within %v (last fetch error: %v)", topic, ends, next, timeout, lastErr)
	}
	return out
}
