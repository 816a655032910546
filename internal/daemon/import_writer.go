package daemon

import (
	"context"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

// importWriter writes an import's rows importBatch at a time with one batch in flight while the next is
// read, so reading the rows (JSON, checks) and Redis's work overlap instead of taking turns. Batches are
// written in order, each after the previous one ended: a device named twice keeps its later row.
type importWriter struct {
	ctx     context.Context
	store   *deadline.Store
	filling importRows       // the batch being read
	spare   importRows       // the other one, in flight while busy
	done    chan batchResult // the batch in flight's result
	busy    bool             // a batch is in flight
	sent    int              // rows of the batch in flight
	written int              // rows written
	refused []int            // the lines of the rows the store refused (deadline.Store.Register), in order
}

// batchResult is what writing one batch did: the lines of the rows the store refused, or an error.
type batchResult struct {
	refused []int
	err     error
}

type importRows struct {
	lines        []int
	ids, parents []string
	regs         []deadline.Registration
}

func (r *importRows) reset() {
	r.lines, r.ids, r.regs, r.parents = r.lines[:0], r.ids[:0], r.regs[:0], r.parents[:0]
}

func newImportWriter(ctx context.Context, store *deadline.Store) *importWriter {
	return &importWriter{ctx: ctx, store: store, done: make(chan batchResult, 1)}
}

// add queues the row read at line, sending the batch once it is full; the error is that of an earlier
// batch.
func (w *importWriter) add(line int, id string, reg deadline.Registration, parent string) error {
	f := &w.filling
	f.lines, f.ids, f.regs, f.parents = append(f.lines, line), append(f.ids, id), append(f.regs, reg), append(f.parents, parent)
	if len(f.ids) < importBatch {
		return nil
	}
	return w.flush()
}

// flush waits for the batch in flight and sends the one being read.
func (w *importWriter) flush() error {
	if err := w.wait(); err != nil {
		return err
	}
	if len(w.filling.ids) == 0 {
		return nil
	}
	w.filling, w.spare = w.spare, w.filling
	w.filling.reset()
	batch := w.spare
	w.busy, w.sent = true, len(batch.ids)
	go func() {
		_, refused, err := w.store.Register(w.ctx, batch.ids, batch.regs, batch.parents)
		lines := make([]int, len(refused))
		for k, i := range refused {
			lines[k] = batch.lines[i]
		}
		w.done <- batchResult{refused: lines, err: err}
	}()
	return nil
}

// finish sends the rows read and waits for every batch: what is left to do once the body is read.
func (w *importWriter) finish() error {
	if err := w.flush(); err != nil {
		return err
	}
	return w.wait()
}

// wait waits for the batch in flight, if any, and returns its error.
func (w *importWriter) wait() error {
	if !w.busy {
		return nil
	}
	w.busy = false
	r := <-w.done
	if r.err == nil {
		w.written += w.sent - len(r.refused)
		w.refused = append(w.refused, r.refused...)
	}
	return r.err
}
