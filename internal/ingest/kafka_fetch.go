package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/loop"
)

// Fetching: each partition the group assigns is read by its own goroutine straight from its leader, a
// fetch at a time, and handed to the chain a chunk at a time. kafka-go's Reader hands its messages
// over one by one through a channel and re-arms the connection's read deadline for each; at the
// signal rates heartbeatd takes, that was about a fifth of its CPU (docs/benchmarks.md).
const (
	// fetchMaxWait is how long the broker may hold a fetch open for a partition with nothing new.
	fetchMaxWait = 500 * time.Millisecond
	// fetchMaxBytes bounds one fetch's response.
	fetchMaxBytes = 8 << 20
	// fetchChunk is the most messages handed over at once, and fetchAhead how many chunks a partition's
	// fetching may run ahead of its hand-over: memory stays bounded while the chain pushes back, and the
	// read deadline is re-armed once per chunk.
	fetchChunk = 256
	fetchAhead = 8
	// readTimeout bounds the reading of one chunk of a fetch's response, after fetchMaxWait.
	readTimeout = 10 * time.Second
)

// consume follows the group's generations until ctx ends, reading every partition each one assigns.
// The generation stays joined after ctx ends, for the last commit; Run closes the group.
func (s *KafkaSource) consume(ctx context.Context, group *kafka.ConsumerGroup, chain *Chain) {
	backoff := loop.Backoff{Min: 200 * time.Millisecond, Max: 10 * time.Second}
	failures := 0
	for {
		gen, err := group.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				return
			}
			if failures++; failures%10 == 1 {
				s.log.Warn("kafka consumer group: cannot join; retrying", zap.Int("attempt", failures), zap.Error(err))
			}
			if !loop.Sleep(ctx, backoff.Next()) {
				return
			}
			continue
		}
		backoff.Reset()
		failures = 0
		s.generation.Store(gen)
		s.generations.Add(1)
		s.assigned(gen)
		// Every partition is waited for from the start, so the first reader to connect does not run ahead.
		for topic, parts := range gen.Assignments {
			for _, p := range parts {
				s.align.join(topicPartition{topic, p.ID})
			}
		}
		for topic, parts := range gen.Assignments {
			for _, p := range parts {
				gen.Start(func(genCtx context.Context) {
					s.readPartition(ctx, genCtx, chain, topicPartition{topic, p.ID}, p.Offset)
				})
			}
		}
	}
}

// readPartition reads tp from offset (the group's committed one, or kafka.FirstOffset) until ctx or the
// generation ends, reconnecting with backoff. It returns only when the generation ends: a reader that
// returned would end the generation for all (kafka-go), and a rejoin is a rebalance for every replica.
func (s *KafkaSource) readPartition(ctx, genCtx context.Context, chain *Chain, tp topicPartition, offset int64) {
	// Reading stops with either; the last acknowledgements are still committed with this generation.
	readCtx, stop := context.WithCancel(genCtx)
	defer stop()
	defer s.align.leave(tp) // also when the generation ended before the first read
	unwatch := context.AfterFunc(ctx, stop)
	defer unwatch()
	backoff := loop.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	failures := 0
	for readCtx.Err() == nil {
		next, err := s.readFrom(readCtx, chain, tp, offset)
		offset = next
		if readCtx.Err() != nil || errors.Is(err, ErrChainStopped) {
			break
		}
		if failures++; failures%10 == 1 {
			s.log.Warn("kafka partition read failed; reconnecting", zap.String("topic", tp.topic),
				zap.Int("partition", tp.partition), zap.Int64("offset", offset), zap.Int("attempt", failures), zap.Error(err))
		}
		if !loop.Sleep(readCtx, backoff.Next()) {
			break
		}
	}
	<-genCtx.Done()
}

// readFrom connects to tp's leader and reads from offset until an error or ctx ends; it returns the
// offset to go on from. A goroutine fetches up to fetchAhead chunks ahead of the hand-over, so a fetch's
// round trip does not pause this partition while the others go on: partitions drained in step hand the
// chain their signals in time order (kafka_align.go).
func (s *KafkaSource) readFrom(ctx context.Context, chain *Chain, tp topicPartition, offset int64) (int64, error) {
	s.align.join(tp)
	defer s.align.leave(tp)
	conn, err := s.dialLeader(ctx, tp)
	if err != nil {
		return offset, err
	}
	defer conn.Close()
	fetchCtx, stop := context.WithCancel(ctx)
	defer stop()
	// A blocked read ends with the fetching, not a fetch wait later.
	unwatch := context.AfterFunc(fetchCtx, func() { _ = conn.SetDeadline(time.Now()) })
	defer unwatch()
	if offset, err = s.seek(conn, tp, offset); err != nil {
		return offset, err
	}
	chunks := make(chan fetchedChunk, fetchAhead)
	free := make(chan []kafka.Message, fetchAhead+2) // chunks handed over, for the fetcher to fill again
	var fetchErr error
	go func() {
		defer close(chunks)
		fetchErr = s.fetch(fetchCtx, conn, tp, offset, chunks, free)
	}()
	var bufs handOverBuffers
	var handOverErr error
	for c := range chunks {
		if handOverErr != nil {
			continue // draining what the fetcher still sends until it stops
		}
		chunk := c.msgs
		if len(chunk) == 0 {
			s.align.caughtUp(tp)
			continue
		}
		s.align.wait(ctx, tp, chunk[0].Time)
		if handOverErr = s.handOver(ctx, chain, tp, chunk, &bufs); handOverErr != nil {
			stop()
			continue
		}
		s.align.handed(tp, chunk[len(chunk)-1].Time, c.atEnd)
		offset = chunk[len(chunk)-1].Offset + 1
		select {
		case free <- chunk[:0]:
		default:
		}
	}
	if handOverErr != nil {
		return offset, handOverErr
	}
	if ctx.Err() != nil {
		return offset, ctx.Err()
	}
	return offset, fetchErr
}

// fetch reads tp from conn, positioned at offset, a fetch at a time and sends its messages in chunks of
// up to fetchChunk until ctx ends or a fetch fails. A chunk sent is not touched again unless it comes
// back through free.
func (s *KafkaSource) fetch(ctx context.Context, conn *kafka.Conn, tp topicPartition, offset int64, chunks chan<- fetchedChunk, free <-chan []kafka.Message) error {
	next := func() []kafka.Message {
		select {
		case c := <-free:
			return c
		default:
			return make([]kafka.Message, 0, fetchChunk)
		}
	}
	chunk := next()
	// send hands the chunk over; the wait for room may be long (the chain pushing back), so the read
	// deadline is re-armed after it.
	send := func(atEnd bool) bool {
		select {
		case chunks <- fetchedChunk{msgs: chunk, atEnd: atEnd}:
		case <-ctx.Done():
			return false
		}
		chunk = next()
		_ = conn.SetReadDeadline(time.Now().Add(readTimeout))
		return true
	}
	for {
		_ = conn.SetReadDeadline(time.Now().Add(fetchMaxWait + readTimeout))
		batch := conn.ReadBatchWith(kafka.ReadBatchConfig{MinBytes: 1, MaxBytes: fetchMaxBytes,
			IsolationLevel: kafka.ReadCommitted, MaxWait: fetchMaxWait})
		var readErr error
		for {
			m, err := batch.ReadMessage()
			if err != nil {
				readErr = err
				break
			}
			offset = m.Offset + 1
			if chunk = append(chunk, m); len(chunk) == fetchChunk && !send(m.Offset+1 >= batch.HighWaterMark()) {
				_ = batch.Close()
				return ctx.Err()
			}
		}
		end := offset >= batch.HighWaterMark()
		closeErr := batch.Close()
		// An empty chunk at the end tells the partition is caught up.
		if (len(chunk) > 0 || end) && !send(end) {
			return ctx.Err()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		err := closeErr
		if err == nil && !errors.Is(readErr, io.EOF) {
			err = readErr
		}
		switch {
		case err == nil, errors.Is(err, kafka.RequestTimedOut):
			// The fetch ended (or waited in vain); the next one goes on from the connection's offset.
		case errors.Is(err, kafka.OffsetOutOfRange):
			// Retention deleted what was not read yet, or the log was truncated: seek again.
			return fmt.Errorf("ingest: kafka %s/%d at offset %d: %w", tp.topic, tp.partition, offset, err)
		default:
			return fmt.Errorf("ingest: kafka fetch %s/%d at offset %d: %w", tp.topic, tp.partition, offset, err)
		}
	}
}

// dialLeader connects to tp's leader through the first broker that answers.
func (s *KafkaSource) dialLeader(ctx context.Context, tp topicPartition) (*kafka.Conn, error) {
	var errs []error
	for _, b := range s.opts.Brokers {
		conn, err := s.dialer.DialLeader(ctx, "tcp", b, tp.topic, tp.partition)
		if err == nil {
			return conn, nil
		}
		errs = append(errs, fmt.Errorf("ingest: kafka leader of %s/%d via %s: %w", tp.topic, tp.partition, b, err))
	}
	return nil, errors.Join(errs...)
}

// seek places conn at offset: kafka.FirstOffset (or any negative offset: nothing committed) is the
// first retained message, and an offset retention already deleted moves up to the first retained one.
func (s *KafkaSource) seek(conn *kafka.Conn, tp topicPartition, offset int64) (int64, error) {
	_ = conn.SetDeadline(time.Now().Add(s.opts.DialTimeout))
	first, last, err := conn.ReadOffsets()
	if err != nil {
		return offset, fmt.Errorf("ingest: kafka offsets of %s/%d: %w", tp.topic, tp.partition, err)
	}
	switch {
	case offset < 0:
		offset = first
	case offset < first:
		s.log.Warn("kafka partition: signals deleted by retention before they were read", zap.String("topic", tp.topic),
			zap.Int("partition", tp.partition), zap.Int64("from", offset), zap.Int64("to", first))
		offset = first
	case offset > last:
		// Past the end (a truncated log): read what comes next rather than wait for the old offset.
		offset = last
	}
	if _, err := conn.Seek(offset, kafka.SeekAbsolute|kafka.SeekDontCheck); err != nil {
		return offset, fmt.Errorf("ingest: kafka seek %s/%d to %d: %w", tp.topic, tp.partition, offset, err)
	}
	_ = conn.SetDeadline(time.Time{})
	return offset, nil
}

// fetchedChunk is a chunk of one partition's messages in offset order; atEnd: its last is the last the
// partition held when it was fetched.
type fetchedChunk struct {
	msgs  []kafka.Message
	atEnd bool
}

// handOver submits a chunk of one partition's messages to the chain in order, tracking their offsets as
// one run with one acknowledgement. One clock read serves the chunk's lag (the offsets) and its receive
// time.
func (s *KafkaSource) handOver(ctx context.Context, chain *Chain, tp topicPartition, msgs []kafka.Message, h *handOverBuffers) error {
	received := s.opts.Now()
	h.offsets = h.offsets[:0]
	for i := range msgs {
		h.offsets = append(h.offsets, msgs[i].Offset)
	}
	ack := s.offsets.add(tp, received, h.offsets)
	s.health.begin(len(msgs))
	for i := range msgs {
		m := &msgs[i]
		err := chain.Submit(ctx, Message{
			Source:   SourceKafka,
			Topic:    m.Topic,
			Key:      m.Key,
			Payload:  m.Value,
			Received: received,
			Stamped:  m.Time,
			Ack:      ack,
		})
		if err != nil {
			// Never applied: their offsets, and those of the run's others, stay uncommitted.
			s.health.dropped(len(msgs) - i)
			return err
		}
	}
	return nil
}

// handOverBuffers are a partition reader's scratch space for handOver.
type handOverBuffers struct {
	offsets []int64
}
