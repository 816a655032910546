package holdback

import (
	"sync"
	"time"
)

// stallDetector notices that heartbeatd itself did not run for a while: a process stop (SIGSTOP), a long
// pause, a frozen VM or a jump of the clock. Meanwhile the sources heard nothing, so the span is a blind
// window like a source outage. tick runs every config.StallTick; a gap between two ticks longer than
// threshold is reported to record, before the new tick counts, so a reader never sees neither the stall
// nor its window.
type stallDetector struct {
	threshold time.Duration
	record    func(from, to time.Time, gap time.Duration)

	mu   sync.Mutex
	last time.Time
}

// reset starts counting from now (at start, and in tests).
func (s *stallDetector) reset(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = now
}

// tick is one beat of the detector at now.
func (s *stallDetector) tick(now time.Time) {
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	if gap := elapsed(last, now); !last.IsZero() && gap > s.threshold {
		s.record(last, now, gap)
	}
	s.reset(now)
}

// stalled reports whether the last tick is older than threshold at now, and when it was: the process has
// just resumed and the tick that will record the stall has not run yet. Until it has, nothing after
// since may be claimed.
func (s *stallDetector) stalled(now time.Time) (since time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last.IsZero() || elapsed(s.last, now) <= s.threshold {
		return time.Time{}, false
	}
	return s.last, true
}

// elapsed is the longer of the monotonic and the wall-clock time between a and b: the monotonic clock
// stands still while a VM is suspended, the wall clock jumps when it is stepped; either is a gap in
// what heartbeatd heard.
func elapsed(a, b time.Time) time.Duration {
	return max(b.Sub(a), b.Round(0).Sub(a.Round(0)))
}
