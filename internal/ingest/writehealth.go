package ingest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// WriteFailure is a deadline write Redis keeps refusing (down, read-only, out of memory) or leaves
// unanswered.
type WriteFailure struct {
	Since time.Time
	Err   error
}

// WriteSpan is a span of time in which deadline writes were in trouble.
type WriteSpan struct{ From, To time.Time }

// errStuckWrite is the failure of a write that has not answered within StuckWrite.
var errStuckWrite = errors.New("a deadline write has not been answered")

// writeHealth follows the chain's batches between dispatch and write: which are being written, which
// failed, and since when. Readiness reads the failure (Chain.WriteFailure), the hold-back the last
// span of trouble (Chain.LastWriteTrouble). A batch's own failed flag is kept by its writer goroutine.
type writeHealth struct {
	stuckAfter time.Duration // ChainOptions.StuckWrite

	mu      sync.Mutex
	writes  map[uint64]time.Time // batches being written, by seq: when each was dispatched
	failing int                  // of them, those whose write failed
	settled time.Time            // when failing last fell to 0
	// current is the refresh failure still being retried, nil while no batch is: one batch stored
	// again says nothing of the others still waiting to be, whose signals a claim must not overtake.
	current atomic.Pointer[WriteFailure]
	// oldest is when the oldest batch still being written was dispatched (unix ns, 0 = none).
	oldest atomic.Int64
	// troubled is the latest span, over, in which a write was refused or went unanswered past stuckAfter.
	troubled atomic.Pointer[WriteSpan]
}

func newWriteHealth(stuckAfter time.Duration, maxInFlight int) *writeHealth {
	return &writeHealth{stuckAfter: stuckAfter, writes: make(map[uint64]time.Time, maxInFlight)}
}

// writing records batch seq dispatched for writing.
func (w *writeHealth) writing(seq uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	w.writes[seq] = now
	if len(w.writes) == 1 {
		w.oldest.Store(now.UnixNano())
	}
}

// failed counts a batch whose write failed (its first failure only). The failure runs from the dispatch
// of the oldest batch still being written, this one or one that has not answered yet (it may wait in
// the client's retries): none of their signals is known to be stored.
func (w *writeHealth) failed(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failing++
	since := time.Unix(0, w.oldest.Load())
	if f := w.current.Load(); f == nil || since.Before(f.Since) {
		w.current.Store(&WriteFailure{Since: since, Err: err})
	}
}

// written records batch seq stored, or given up at shutdown; hadFailed says whether failed counted it.
// A failure ends once no batch fails and every batch dispatched before the last stopped failing is
// written too.
func (w *writeHealth) written(seq uint64, hadFailed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if at, ok := w.writes[seq]; ok && (hadFailed || now.Sub(at) > w.stuckAfter) {
		w.troubledUntil(at, now)
	}
	delete(w.writes, seq)
	if hadFailed {
		if w.failing--; w.failing == 0 {
			w.settled = now
		}
	}
	var oldest time.Time
	for _, at := range w.writes {
		if oldest.IsZero() || at.Before(oldest) {
			oldest = at
		}
	}
	if oldest.IsZero() {
		w.oldest.Store(0)
	} else {
		w.oldest.Store(oldest.UnixNano())
	}
	if w.failing == 0 && (oldest.IsZero() || !oldest.Before(w.settled)) {
		w.current.Store(nil)
	}
}

// troubledUntil records that a write dispatched at from was refused or unanswered until to; the span
// grows while troubles follow each other within stuckAfter.
func (w *writeHealth) troubledUntil(from, to time.Time) {
	if f := w.current.Load(); f != nil && f.Since.Before(from) {
		from = f.Since
	}
	if at := w.oldest.Load(); at != 0 && time.Unix(0, at).Before(from) {
		from = time.Unix(0, at)
	}
	if prev := w.troubled.Load(); prev != nil && !prev.To.Add(w.stuckAfter).Before(from) {
		if prev.From.Before(from) {
			from = prev.From
		}
		if prev.To.After(to) {
			to = prev.To
		}
	}
	w.troubled.Store(&WriteSpan{From: from, To: to})
}

// lastTrouble is the latest span of trouble that is over (zero when there was none).
func (w *writeHealth) lastTrouble() WriteSpan {
	if t := w.troubled.Load(); t != nil {
		return *t
	}
	return WriteSpan{}
}

// failure is the write failure being retried, or a write stuck longer than stuckAfter, or nil.
func (w *writeHealth) failure() *WriteFailure {
	if f := w.current.Load(); f != nil {
		return f
	}
	if at := w.oldest.Load(); at != 0 {
		if since := time.Unix(0, at); time.Since(since) > w.stuckAfter {
			return &WriteFailure{Since: since, Err: fmt.Errorf("%w for %v", errStuckWrite, w.stuckAfter)}
		}
	}
	return nil
}
