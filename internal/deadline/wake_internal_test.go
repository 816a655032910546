package deadline

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heartbeatd/heartbeatd/internal/slotlayout"
)

// TestSlotOrderGroupsAWakesChildrenBySlot: a wake's children go to Redis slot by slot, so a chunk is a
// few script calls, and each slot's children keep the order the wake found them in (the script's reply
// is matched to them in that order).
func TestSlotOrderGroupsAWakesChildrenBySlot(t *testing.T) {
	s := &Store{layouts: slotlayout.New(nil, "", 8, nil, nil)}
	var kids []wakeUp
	for i := range 200 {
		kids = append(kids, wakeUp{child: fmt.Sprintf("s-%d", i), downParent: fmt.Sprintf("gw-%d", i%3)})
	}
	bySlotBefore := map[int][]wakeUp{}
	for _, k := range kids {
		slot := Slot(k.child, 8)
		bySlotBefore[slot] = append(bySlotBefore[slot], k)
	}
	ordered, slots := s.slotOrder(slices.Clone(kids))
	require.Equal(t, 8, slots)
	require.Len(t, ordered, len(kids))
	runs := 0
	bySlotAfter := map[int][]wakeUp{}
	for i, k := range ordered {
		slot := Slot(k.child, 8)
		require.Equal(t, slot, k.slot, "%s carries its slot", k.child)
		k.slot = 0 // compared with the kids as found
		if i == 0 || slot != Slot(ordered[i-1].child, 8) {
			runs++
		}
		bySlotAfter[slot] = append(bySlotAfter[slot], k)
	}
	require.Equal(t, len(bySlotBefore), runs, "each slot's children in one run")
	require.Equal(t, bySlotBefore, bySlotAfter, "within a slot, the order the wake found them in")
}
