package scan

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSlotScheduleClaimsOnlyDueSlots: a wake-up at a known due time claims the slots due then, a slot not
// looked at yet is always claimed, and the loop sleeps until the earliest known due time, at most until
// its next look at every slot.
func TestSlotScheduleClaimsOnlyDueSlots(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	maxIdle := 50 * time.Millisecond
	p := newSlotSchedule()
	owned := []int{0, 4, 8}
	due, others := p.split(owned, t0)
	require.Equal(t, owned, due, "nothing looked at yet: every slot")
	require.Empty(t, others)
	require.True(t, p.stale(t0, maxIdle))

	p.learn(owned, []time.Time{t0.Add(10 * time.Millisecond), {}, t0.Add(30 * time.Millisecond)})
	p.looked = t0
	require.False(t, p.stale(t0.Add(49*time.Millisecond), maxIdle))
	require.Equal(t, 10*time.Millisecond, p.wait(owned, t0, maxIdle))
	due, others = p.split(owned, t0.Add(10*time.Millisecond))
	require.Equal(t, []int{0}, due, "only the slot due then")
	require.Equal(t, []int{4, 8}, others)

	p.learn([]int{0}, []time.Time{{}})
	require.Equal(t, 20*time.Millisecond, p.wait(owned, t0.Add(10*time.Millisecond), maxIdle))
	p.learn([]int{8}, []time.Time{{}})
	require.Equal(t, 40*time.Millisecond, p.wait(owned, t0.Add(10*time.Millisecond), maxIdle), "nothing known: the next look")
	require.True(t, p.stale(t0.Add(maxIdle), maxIdle))
	require.Equal(t, time.Duration(0), p.wait(append(owned, 12), t0.Add(10*time.Millisecond), maxIdle), "a slot gained: at once")

	p.forget()
	due, _ = p.split(owned, t0)
	require.Equal(t, owned, due, "after a wake from outside: every slot")
}

// TestSlotScheduleGapsClaims: a loop woken for due times claims at most once per claimGap, so deadlines
// due close together go out in one claim; after a full batch it claims again at once.
func TestSlotScheduleGapsClaims(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	maxIdle := 50 * time.Millisecond
	p := newSlotSchedule()
	owned := []int{0, 4}
	p.looked, p.claimed = t0, t0
	p.learn(owned, []time.Time{t0.Add(time.Millisecond), t0.Add(20 * time.Millisecond)})
	require.Equal(t, claimGap, p.wait(owned, t0, maxIdle), "a deadline 1 ms after the last claim waits for the gap")
	require.Equal(t, 2*time.Millisecond, p.wait(owned, t0.Add(3*time.Millisecond), maxIdle))
	p.learn(owned[:1], []time.Time{t0.Add(10 * time.Millisecond)})
	require.Equal(t, 10*time.Millisecond, p.wait(owned, t0, maxIdle), "past the gap: the deadline itself")
	p.backlog = true
	p.learn(owned[:1], []time.Time{t0})
	require.Equal(t, time.Duration(0), p.wait(owned, t0, maxIdle), "a full batch: at once")
}
