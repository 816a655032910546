package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// stage is one long-running component: run blocks until its context ends or it fails.
type stage struct {
	name string
	run  func(ctx context.Context) error
}

// lifecycle runs stages as a group and stops them in reverse start order: the first stage to fail stops
// the rest, and each stage gets its own context so that producers of work (ingest) stop and drain before
// what they feed (scanners, publisher, Redis) goes away.
type lifecycle struct {
	log    *zap.Logger
	stages []stage
	closes []namedClose
}

type namedClose struct {
	name string
	fn   func() error
}

// add registers a long-running stage; later stages are stopped first.
func (l *lifecycle) add(name string, run func(ctx context.Context) error) {
	l.stages = append(l.stages, stage{name: name, run: run})
}

// onClose registers a cleanup run after every stage stopped, in reverse order of registration.
func (l *lifecycle) onClose(name string, fn func() error) {
	l.closes = append(l.closes, namedClose{name: name, fn: fn})
}

// run starts every stage, waits for ctx to end or a stage to fail, then stops the stages in reverse order,
// each within what is left of timeout, and runs the cleanups. Errors are joined.
func (l *lifecycle) run(ctx context.Context, timeout time.Duration) error {
	type running struct {
		cancel context.CancelFunc
		done   chan struct{}
		err    error
	}
	failed := make(chan string, len(l.stages))
	rs := make([]*running, len(l.stages))
	for i, s := range l.stages {
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		r := &running{cancel: cancel, done: make(chan struct{})}
		rs[i] = r
		go func() {
			defer close(r.done)
			r.err = s.run(sctx)
			if sctx.Err() == nil {
				if r.err == nil {
					r.err = fmt.Errorf("%s stopped unexpectedly", s.name)
				}
				failed <- s.name
			}
		}()
	}
	var cause error
	select {
	case <-ctx.Done():
		l.log.Info("shutting down")
	case name := <-failed:
		l.log.Error("component failed; shutting down", zap.String("component", name))
		cause = fmt.Errorf("%s failed", name)
	}
	// The ordered stop gets most of the timeout. If a stage is still running when it is used up, every
	// stage not yet stopped is cancelled at once and they share the rest: waiting for them one after
	// another would report stages that were never even asked to stop as stuck, and leave them running.
	grace := min(timeout/10, time.Second)
	deadline := time.Now().Add(timeout - grace)
	expired := false
	var errs []error
	if cause != nil {
		errs = append(errs, cause)
	}
	for i := len(rs) - 1; i >= 0; i-- {
		r, s := rs[i], l.stages[i]
		r.cancel()
		if !waitUntil(r.done, deadline) && !expired {
			expired = true
			for _, rest := range rs[:i] {
				rest.cancel()
			}
			deadline = time.Now().Add(grace)
			waitUntil(r.done, deadline)
		}
		select {
		case <-r.done:
			if r.err != nil && !errors.Is(r.err, context.Canceled) {
				errs = append(errs, fmt.Errorf("%s: %w", s.name, r.err))
			}
		default:
			errs = append(errs, fmt.Errorf("%s did not stop within the shutdown timeout", s.name))
		}
	}
	for i := len(l.closes) - 1; i >= 0; i-- {
		c := l.closes[i]
		if err := c.fn(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", c.name, err))
		}
	}
	return errors.Join(errs...)
}

// waitUntil waits for done until deadline and reports whether it closed; a closed done wins over a
// deadline already past.
func waitUntil(done <-chan struct{}, deadline time.Time) bool {
	select {
	case <-done:
		return true
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
