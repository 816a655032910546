package deadline

import "time"

// Early warning (docs/events.md, `late`). A type with warn_after has its devices' scores at last signal +
// warn_after instead of + timeout, so a type without it pays nothing: the signal writes one score either
// way, and the claim of a warned score is an ordinary fresh claim, which alarm.Decide turns into `late`
// and an incident held until last signal + timeout (HoldLate). A signal before then recovers it through
// the usual probe. Everything that reads a last signal from a score subtracts the lead, not the timeout.

// lead is how far after a signal of type name its score lies: its warn_after when it has one, else its
// timeout.
func (s *Store) lead(name string) time.Duration {
	if w := s.warnAfter(name); w > 0 {
		return w
	}
	return s.timeout(name)
}

// holdDeferredBack marks the due claims of deferred incidents whose interruption the hold-back does not
// allow yet (a blind window opened since they were deferred): they wait, as a fresh claim of the same
// deadline would. Deferred are an incident reported late or moved past a quiet interval (its interruption
// is due at InterruptedAt), and one whose parent recovered (its own timeout ran out now). A fleet
// without them pays a comparison per due claim.
func (s *Store) holdDeferredBack(claims []Claim, now time.Time, watermarkFor WatermarkFunc) {
	if watermarkFor == nil {
		return
	}
	for i := range claims {
		c := &claims[i]
		if c.Fresh {
			continue
		}
		var due int64
		switch {
		case (c.State.Hold == HoldLate || c.State.Hold == HoldQuiet) && c.State.Next == 0:
			due = c.State.InterruptedAt
		case c.State.Hold == HoldAfterParent:
			due = now.UnixMilli()
		default:
			continue
		}
		if due > watermarkFor(AsStored(s.timeout(c.recordedType()))).UnixMilli() {
			c.HeldBack = true
		}
	}
}
