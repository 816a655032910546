package sweep

import "context"

// Pass is one pass of the sweeper now, as Run makes every Every.
func (w *Sweeper) Pass(ctx context.Context) error { return w.pass(ctx) }
