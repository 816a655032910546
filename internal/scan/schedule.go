package scan

import "time"

// slotSchedule is what one claim loop knows of its slots between wake-ups: when a claim of each may next
// find work (deadline.ClaimResult.SlotNext), and when it last looked at all of them. A wake-up at a known due time
// claims only the slots due then, so a deadline costs one slot's claim script rather than one per slot
// of the loop's share; a look at every slot at least every MaxIdleWait still bounds how late a deadline
// written since by another replica, or earlier than a slot's known next, is noticed.
type slotSchedule struct {
	next   map[int]time.Time // slot → its next due time (zero: none known); absent: not looked at yet
	looked time.Time         // the last look at every slot (zero: none yet)
	// claimed is when the last claim began, and backlog whether a slot of it returned a full batch
	// (claimed again at once).
	claimed time.Time
	backlog bool
}

// claimGap is the least time between two claims of one loop woken for due times (not after a full
// batch, nor when woken from outside): the deadlines due within it are claimed and published together.
// A claim per deadline costs Redis and the replica several times as much once deadlines come a few
// thousand a second, for a few milliseconds of lateness saved.
const claimGap = 5 * time.Millisecond

func newSlotSchedule() *slotSchedule { return &slotSchedule{next: map[int]time.Time{}} }

// forget makes the next wake-up claim every slot (a wake from outside, a failure).
func (p *slotSchedule) forget() {
	clear(p.next)
	p.looked = time.Time{}
}

// split returns the slots of owned a wake-up at now claims (due by now, or not looked at yet) and the
// others.
func (p *slotSchedule) split(owned []int, now time.Time) (due, others []int) {
	for _, slot := range owned {
		if t, known := p.next[slot]; !known || (!t.IsZero() && !t.After(now)) {
			due = append(due, slot)
		} else {
			others = append(others, slot)
		}
	}
	return due, others
}

// stale reports whether every slot is to be looked at again at now.
func (p *slotSchedule) stale(now time.Time, maxIdle time.Duration) bool {
	return !now.Before(p.looked.Add(maxIdle))
}

// learn records the next due times of slots, in the same order.
func (p *slotSchedule) learn(slots []int, next []time.Time) {
	for i, slot := range slots {
		p.next[slot] = next[i]
	}
}

// wait is how long to sleep at now: until the earliest due time known among owned, at most until the
// next look at every slot.
func (p *slotSchedule) wait(owned []int, now time.Time, maxIdle time.Duration) time.Duration {
	wake := p.looked.Add(maxIdle)
	for _, slot := range owned {
		if t, known := p.next[slot]; !known {
			return 0
		} else if !t.IsZero() && t.Before(wake) {
			wake = t
		}
	}
	if !p.backlog {
		wake = maxTime(wake, p.claimed.Add(claimGap))
	}
	return max(wake.Sub(now), 0)
}

// maxTime is the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
