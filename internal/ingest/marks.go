package ingest

import (
	"context"

	"github.com/heartbeatd/heartbeatd/internal/deadline"
)

// writeMarks stores the batch's reported failures and offline messages (deadline.Store.MarkEarlier),
// keeping what each did for countMark. A refresher that cannot move deadlines earlier (a test's fake)
// leaves them unwritten.
func (c *Chain) writeMarks(ctx context.Context, b *batch) error {
	if len(b.marks) == 0 {
		return nil
	}
	m, ok := c.refresher.(Marker)
	if !ok {
		return nil
	}
	marked, err := m.MarkEarlier(ctx, b.marks)
	b.marked = marked
	return err
}

// countMark counts what mark i of b did (heartbeatd_signals_marked_total); one the refresher could not
// write counts as unknown.
func (c *Chain) countMark(b *batch, i int) {
	result := deadline.MarkUnknown
	if i < len(b.marked) {
		result = b.marked[i]
	}
	name := "unknown"
	if int(result) >= 0 && int(result) < len(markResults) {
		name = markResults[result]
	}
	c.m.marked.WithLabelValues(b.marks[i].Cause, name).Inc()
}
