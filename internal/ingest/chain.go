package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/defaults"
	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// ChainOptions configures a Chain (config: ingest.*; a zero value takes the config.Default* of its key).
type ChainOptions struct {
	// MaxClockSkew: a ts further than this past the receive time is replaced by the receive time.
	MaxClockSkew time.Duration
	// Coalesce > 0 skips a device's deadline write while its signal time is less than this past the last
	// one written and its type did not change (ingest.coalesce).
	Coalesce time.Duration
	// Batch is the most messages one refresh carries; Linger the longest a partial batch waits for more
	// while another batch is in flight, or while the pace of a steady stream fills it within Linger
	// (otherwise, with nothing in flight, a batch is sent as soon as the input is drained, so a quiet
	// fleet pays no linger).
	Batch  int
	Linger time.Duration
	// MaxInFlight bounds the batches between dispatch and acknowledgement. When all are taken, Submit
	// blocks: that is the backpressure that stops the sources while Redis is down.
	MaxInFlight int
	// KnownType reports whether a type name has a configured policy. A signal naming another type is
	// counted, logged (MaxLoggedTypes) and written as the default type. nil treats every name as known.
	KnownType func(string) bool
	// DeadLetterTimeout bounds the retries of one dead letter (default 5s). After it the bad message is
	// acknowledged without its dead letter (counted): bad input must never hold up valid input.
	DeadLetterTimeout time.Duration
	// StuckWrite: a batch being written longer than this counts as refused (default 1s), since a write
	// can wait in the Redis client's own dial and retries for seconds before its failure comes back.
	StuckWrite time.Duration
	// OfflineGrace: an offline presence message moves the device's deadline to its receipt + this
	// (ingest.offline_grace; 0 = at once).
	OfflineGrace time.Duration
	Now          func() time.Time
	Logger       *zap.Logger
	Registerer   prometheus.Registerer
}

// ErrChainStopped is returned by Submit when the chain is not running any more.
var ErrChainStopped = errors.New("ingest: chain stopped")

// Chain is the one path every signal takes from a source into Redis; see the package comment.
type Chain struct {
	refresher Refresher
	dl        event.DeadLetterSink
	opts      ChainOptions
	now       func() time.Time
	log       *zap.Logger
	m         *metrics

	in  chan item
	dlq chan dlJob
	// dlFailing is set while the dead-letter topic refuses writes: a full queue then drops at once
	// instead of waiting for room that will not come.
	dlFailing atomic.Bool
	// health follows the batches being written: which fail, since when (writehealth.go).
	health *writeHealth
	tokens chan struct{} // one per batch between dispatch and acknowledgement
	freed  chan struct{} // a batch was released: the batcher may stop lingering
	done   chan struct{} // closed when Run returns

	inFlight atomic.Int64
	seq      uint64 // batcher only

	relMu   sync.Mutex
	ring    []*batch // completed batches waiting for their turn, by seq % MaxInFlight
	release uint64   // seq of the next batch to acknowledge
	pool    sync.Pool

	unknown *unknownTypes
	// intervals samples the accepted signals for the timeout advice (nil: none).
	intervals *Intervals

	wg      sync.WaitGroup
	running atomic.Bool
}

// item is one valid signal on its way to a batch.
type item struct {
	sig      deadline.Signal
	mark     *deadline.Mark // a reported failure or an offline message instead of a signal
	received time.Time      // when the source handed it over: lateness is judged then
	ack      func()
	src      *sourceMetrics
	// gated: its source sends no more until what it sent is acknowledged (an MQTT in-flight window, an
	// HTTP client awaiting its answer); a Kafka consumer fetches ahead regardless.
	gated bool
}

// ackItem is a batch member waiting for its acknowledgement.
type ackItem struct {
	ack       func()
	src       *sourceMetrics
	coalesced bool
	mark      bool // sig indexes batch.marks instead
	sig       int  // index of its signal in batch.sigs (not coalesced)
}

type batch struct {
	seq uint64
	// began is when its first signal came, last when the batcher last woke for one (zero: not since);
	// streaming, whether a write was in flight when it began; follows, whether it goes on from a batch
	// of at least followsShare of Batch that went out less than Linger before; gated, whether a signal of
	// it came from a gated source (item.gated). waitsForStream reads them.
	began, last               time.Time
	streaming, follows, gated bool
	failed                    bool // a write of it failed: it counts in writeHealth.failing until written
	sigs                      []deadline.Signal
	received                  []time.Time // aligned with sigs
	items                     []ackItem
	// late marks the signals not written because they were late (nil: none); write is the rest.
	late  []bool
	write []deadline.Signal
	// marks move deadlines earlier (reported failures, offline messages), written after the signals;
	// marked holds what each did once written (nil: not written, the refresher cannot).
	marks  []deadline.Mark
	marked []deadline.MarkResult
}

// add puts it in the batch: a mark, a signal the coalescer (nil: none) skips, or a signal to write.
func (b *batch) add(it item, co *coalescer) {
	b.gated = b.gated || it.gated
	switch {
	case it.mark != nil:
		b.items = append(b.items, ackItem{ack: it.ack, src: it.src, mark: true, sig: len(b.marks)})
		b.marks = append(b.marks, *it.mark)
		if co != nil {
			co.forget(it.mark.Device) // the signal after it is the recovery: never coalesced away
		}
	case co != nil && co.skip(it.sig):
		b.items = append(b.items, ackItem{ack: it.ack, src: it.src, coalesced: true})
	default:
		b.items = append(b.items, ackItem{ack: it.ack, src: it.src, sig: len(b.sigs)})
		b.sigs = append(b.sigs, it.sig)
		b.received = append(b.received, it.received)
	}
}

// NewChain builds a chain writing to refresher and sending dead letters to deadLetters (nil: bad input
// is counted, logged and acknowledged). Run starts it.
func NewChain(refresher Refresher, deadLetters event.DeadLetterSink, opts ChainOptions) (*Chain, error) {
	if refresher == nil {
		return nil, errors.New("ingest: chain needs a refresher")
	}
	opts.MaxClockSkew = defaults.Positive(opts.MaxClockSkew, config.DefaultMaxClockSkew)
	if opts.Coalesce < 0 {
		return nil, fmt.Errorf("ingest: coalesce %v is negative", opts.Coalesce)
	}
	opts.Batch = defaults.Positive(opts.Batch, config.DefaultIngestBatch)
	opts.Linger = defaults.Positive(opts.Linger, config.DefaultIngestLinger)
	opts.MaxInFlight = defaults.Positive(opts.MaxInFlight, config.DefaultIngestMaxInFlight)
	opts.DeadLetterTimeout = defaults.Positive(opts.DeadLetterTimeout, 5*time.Second)
	opts.StuckWrite = defaults.Positive(opts.StuckWrite, time.Second)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Logger = cmp.Or(opts.Logger, zap.NewNop())
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	c := &Chain{
		refresher: refresher,
		dl:        deadLetters,
		opts:      opts,
		now:       opts.Now,
		log:       opts.Logger.With(zap.String("component", "ingest")),
		m:         m,
		in:        make(chan item, opts.Batch),
		dlq:       make(chan dlJob, 1024),
		tokens:    make(chan struct{}, opts.MaxInFlight),
		freed:     make(chan struct{}, 1),
		done:      make(chan struct{}),
		ring:      make([]*batch, opts.MaxInFlight),
		health:    newWriteHealth(opts.StuckWrite, opts.MaxInFlight),
		intervals: newIntervals(),
	}
	c.unknown = newUnknownTypes(c.log)
	c.pool.New = func() any {
		return &batch{sigs: make([]deadline.Signal, 0, opts.Batch), items: make([]ackItem, 0, opts.Batch)}
	}
	return c, nil
}

// Run runs the batcher and the dead-letter worker until ctx ends, then waits for the batches in flight:
// those not yet written stop retrying and stay unacknowledged, so their brokers deliver them again.
func (c *Chain) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("ingest: chain already running")
	}
	defer close(c.done)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.deadLetterLoop(ctx)
	}()
	c.batcher(ctx)
	c.wg.Wait()
	return nil
}

// Submit takes one message from a source. Bad input goes to the dead-letter path; a valid signal is
// queued for the next batch. Submit blocks while the chain is full (backpressure) and returns an error
// only when ctx ended or the chain stopped; the message is then not acknowledged.
func (c *Chain) Submit(ctx context.Context, m Message) error {
	_, err := c.Offer(ctx, m)
	return err
}

// Offer is Submit for a source that answers its sender (HTTP): it also returns the dead-letter reason
// of bad input, "" for a signal queued for its write.
func (c *Chain) Offer(ctx context.Context, m Message) (reason string, err error) {
	select {
	case <-c.done:
		return "", ErrChainStopped
	default:
	}
	src := c.m.source(m.Source)
	received := m.Received
	if received.IsZero() {
		received = c.now()
	}
	d, reason := decode(&m)
	if reason != "" {
		return reason, c.deadLetter(ctx, &m, src, reason, received)
	}
	seen := received
	if d.ts.IsZero() {
		d.ts = m.Stamped
	}
	if !d.ts.IsZero() {
		seen = d.ts
		if seen.Sub(received) > c.opts.MaxClockSkew {
			seen = received
			src.clamped.Inc()
		}
	}
	if d.typ != "" && c.opts.KnownType != nil && !c.opts.KnownType(d.typ) {
		c.m.unknownTypes.Inc()
		c.unknown.note(d.typ, d.device, received)
		d.typ = deadline.DefaultType // a device-chosen name is never recorded (docs/signals.md)
	}
	it := item{sig: deadline.Signal{Device: d.device, Type: d.typ, Parent: d.parent, Seen: seen}, received: received, ack: m.Ack, src: src,
		gated: m.Source != SourceKafka}
	switch {
	case m.Presence == config.PresenceOffline:
		it.mark = &deadline.Mark{Device: d.device, At: seen, Deadline: received.Add(c.opts.OfflineGrace), Cause: deadline.CauseOffline}
	case d.fail:
		it.mark = &deadline.Mark{Device: d.device, Type: d.typ, At: seen, Deadline: seen, Cause: deadline.CauseReported,
			Reason: d.reason, Own: true}
	default:
		c.intervals.observe(d.device, d.typ, seen)
	}
	select {
	case c.in <- it: // the common case, without the cost of a three-way select
		return "", nil
	default:
	}
	select {
	case c.in <- it:
		return "", nil
	case <-ctx.Done():
		return "", fmt.Errorf("ingest: submit: %w", ctx.Err())
	case <-c.done:
		return "", ErrChainStopped
	}
}

// Done is closed once the chain stopped: a message submitted and not yet acknowledged then never is.
func (c *Chain) Done() <-chan struct{} { return c.done }

// discard acknowledges a message that carries no signal and counts it under result.
func (c *Chain) discard(source, result string, ack func()) {
	s := c.m.source(source)
	switch result {
	case resultRetained:
		s.retained.Inc()
	case resultShed:
		s.shed.Inc()
	case resultIgnored:
		s.ignored.Inc()
	}
	if ack != nil {
		ack()
	}
}

// setConnected updates the ingest_connected gauge of a source.
func (c *Chain) setConnected(source string, up bool) {
	v := 0.0
	if up {
		v = 1
	}
	c.m.connected.WithLabelValues(source).Set(v)
}

// batcher groups signals into batches: a batch goes out when it is full, when the input is drained and
// no batch is in flight unless its stream fills it soon (waitsForStream; a quiet fleet waits for nothing),
// or when it lingered long enough.
func (c *Chain) batcher(ctx context.Context) {
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	var co *coalescer
	var rotate <-chan time.Time
	if c.opts.Coalesce > 0 {
		co = newCoalescer(c.opts.Coalesce)
		t := time.NewTicker(max(c.opts.Coalesce, 10*time.Millisecond))
		defer t.Stop()
		rotate = t.C
	}
	var cur *batch
	var sent time.Time // when the previous batch went out
	var sentN int      // its messages
	// took: an item joined cur since the input was last found drained. The stream's pace
	// (waitsForStream) is read when it is: one clock read per drain rather than per item.
	took := false
	add := func(it item) {
		if cur == nil {
			cur = c.newBatch(sent, sentN)
			linger.Reset(c.opts.Linger)
		} else {
			took = true
		}
		cur.add(it, co)
	}
	dispatch := func() bool {
		linger.Stop()
		b := cur
		cur, sent, sentN = nil, time.Now(), len(b.items)
		return c.dispatch(ctx, b)
	}
	for {
		if cur == nil {
			select {
			case <-ctx.Done():
				return
			case it := <-c.in:
				add(it)
			case <-rotate:
				co.rotate()
			}
			continue
		}
		if len(cur.items) >= c.opts.Batch {
			if !dispatch() {
				return
			}
			continue
		}
		select {
		case it := <-c.in:
			add(it)
			continue
		default:
		}
		if took && cur.streaming {
			cur.last = time.Now() // when the last item was taken, however it was
		}
		took = false
		if c.inFlight.Load() == 0 && !c.waitsForStream(cur, linger) {
			if !dispatch() {
				return
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case it := <-c.in:
			add(it)
		case <-c.freed:
			// Re-check: the batch goes out now if that was the last one in flight.
		case <-linger.C:
			if !dispatch() {
				return
			}
		case <-rotate:
			co.rotate()
		}
	}
}

// dispatch hands a batch to its own goroutine once a slot is free; it blocks while MaxInFlight batches
// are unacknowledged. False when ctx ended first.
func (c *Chain) dispatch(ctx context.Context, b *batch) bool {
	select {
	case c.tokens <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	b.seq = c.seq
	c.seq++
	c.inFlight.Add(1)
	c.health.writing(b.seq)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ok := c.apply(ctx, b)
		c.health.written(b.seq, b.failed)
		b.failed = false
		if ok {
			c.complete(b)
		}
	}()
	return true
}

// apply writes a batch, retrying with backoff until Redis acknowledges it or ctx ends.
func (c *Chain) apply(ctx context.Context, b *batch) bool {
	if len(b.sigs) == 0 && len(b.marks) == 0 {
		return true
	}
	var firstErr time.Time
	backoff := loop.Backoff{Min: 20 * time.Millisecond, Max: 2 * time.Second}
	refresh := c.refresher.Refresh
	for attempt := 0; ; attempt++ {
		start := time.Now()
		err := c.write(ctx, b, refresh)
		c.m.refresh.Observe(time.Since(start).Seconds())
		if err == nil {
			if attempt > 0 {
				c.log.Info("deadline refresh recovered", zap.Int("attempts", attempt+1), zap.Duration("after", time.Since(firstErr)))
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		c.m.refreshErrors.Inc()
		if attempt == 0 {
			b.failed = true
			c.health.failed(err)
			firstErr = start
			c.log.Warn("deadline refresh failed; holding the batch unacknowledged and retrying", zap.Int("signals", len(b.sigs)), zap.Error(err))
		} else if attempt%20 == 0 {
			c.log.Warn("deadline refresh still failing", zap.Int("attempts", attempt+1), zap.Duration("for", time.Since(firstErr)), zap.Error(err))
		}
		if !loop.Sleep(ctx, backoff.Next()) {
			return false
		}
		// The failed attempt may have stored part of the batch: a retry must not skip a recovery probe
		// because its own write finds the device already there (deadline.Store.RefreshRetry).
		if r, ok := c.refresher.(retryRefresher); ok {
			refresh = r.RefreshRetry
		}
	}
}

// lateRefresher is a Refresher that tells late signals apart (*deadline.Store): only it knows the type
// recorded for a device whose signal names none, and so its timeout.
type lateRefresher interface {
	Late(ctx context.Context, signals []deadline.Signal, received []time.Time) ([]bool, error)
}

// write stores the batch: its signals, then its marks (deadline.Store.MarkEarlier), which compare with
// the last signal stored, so a failure and a later signal of the same batch end as the later one says.
func (c *Chain) write(ctx context.Context, b *batch, refresh func(context.Context, []deadline.Signal) error) error {
	if err := c.writeSignals(ctx, b, refresh); err != nil {
		return err
	}
	return c.writeMarks(ctx, b)
}

// writeSignals refreshes the batch's signals except the late ones (docs/signals.md): a signal whose deadline already
// passed proves nothing about now, and written it would report a recovery and a new interruption at
// once. It is acknowledged and counted as late, and moves nothing, last_seen included. Judged at receipt
// (deadline.Store.Late), so a batch held through a Redis outage is written once Redis is back.
func (c *Chain) writeSignals(ctx context.Context, b *batch, refresh func(context.Context, []deadline.Signal) error) error {
	if len(b.sigs) == 0 {
		return nil
	}
	sigs := b.sigs
	if l, ok := c.refresher.(lateRefresher); ok {
		late, err := l.Late(ctx, b.sigs, b.received)
		if err != nil {
			return err
		}
		b.late = late
		if late != nil {
			b.write = b.write[:0]
			for i, sig := range b.sigs {
				if !late[i] {
					b.write = append(b.write, sig)
				}
			}
			sigs = b.write
		}
	}
	if len(sigs) == 0 {
		return nil
	}
	return refresh(ctx, sigs)
}

// retryRefresher is a Refresher that knows a batch is sent again (*deadline.Store).
type retryRefresher interface {
	RefreshRetry(ctx context.Context, signals []deadline.Signal) error
}

// LastWriteTrouble returns the latest span that is over in which a deadline write was refused or went
// unanswered longer than StuckWrite: from the dispatch of the oldest write then in flight until one was
// stored (zero when there was none). A reader that slept through it, waiting on the same frozen Redis,
// learns of it afterwards, while the signals that queued meanwhile are still being written.
func (c *Chain) LastWriteTrouble() WriteSpan { return c.health.lastTrouble() }

// WriteFailure reports the refresh failure being retried, or a write stuck longer than StuckWrite, or nil
// while Redis stores what it is sent. Readiness reads it: a Redis that answers PING but refuses writes
// (maxmemory) stores no signal.
func (c *Chain) WriteFailure() *WriteFailure { return c.health.failure() }

// complete acknowledges batches strictly in dispatch order. A coalesced message relies on a write made
// by its own or an earlier batch, so it may only be acknowledged once every earlier batch is stored;
// in-order release gives that, and gives MQTT the in-order PUBACKs the protocol asks for.
func (c *Chain) complete(b *batch) {
	c.relMu.Lock()
	defer c.relMu.Unlock()
	n := uint64(len(c.ring))
	c.ring[b.seq%n] = b
	for {
		r := c.ring[c.release%n]
		if r == nil || r.seq != c.release {
			return
		}
		c.ring[c.release%n] = nil
		c.release++
		// Applied signals are counted a run of one source at a time: one atomic add, not one per signal.
		var appliedSrc *sourceMetrics
		applied := 0
		for _, it := range r.items {
			switch {
			case it.mark:
				c.countMark(r, it.sig)
			case it.coalesced:
				it.src.coalesced.Inc()
			case r.late != nil && r.late[it.sig]:
				it.src.late.Inc()
			default:
				if it.src != appliedSrc {
					countApplied(appliedSrc, applied)
					appliedSrc, applied = it.src, 0
				}
				applied++
			}
		}
		countApplied(appliedSrc, applied)
		for _, it := range r.items { // counted first: whoever awaits an acknowledgement sees its count
			if it.ack != nil {
				it.ack()
			}
		}
		clear(r.items)
		clear(r.sigs)
		clear(r.write)
		clear(r.marks)
		r.sigs, r.received, r.items, r.write, r.late = r.sigs[:0], r.received[:0], r.items[:0], r.write[:0], nil
		r.marks, r.marked = r.marks[:0], nil
		c.pool.Put(r)
		c.inFlight.Add(-1)
		<-c.tokens
		select {
		case c.freed <- struct{}{}:
		default:
		}
	}
}

// countApplied adds n applied signals to src's counter (nil: none).
func countApplied(src *sourceMetrics, n int) {
	if src != nil && n > 0 {
		src.applied.Add(float64(n))
	}
}
