package deadline

import (
	"slices"

	"github.com/redis/go-redis/v9"
)

// slotCalls groups work on slots into script calls that name each slot's keys once, as a group: one
// call for a whole batch on a standalone Redis, one per slot on Redis Cluster, where a script's keys
// must share a hash slot. Every call's arguments start with head; every piece of work with the number
// (1-based) of its slot's key group in its call.
type slotCalls struct {
	cluster bool
	head    []any
	keysOf  func(slot int) []string
	calls   []scriptCall
	callOf  map[int]int // slot → call index
	groupOf map[int]int // slot → its key group's number in its call
}

func (s *Store) newSlotCalls(keysOf func(slot int) []string, head ...any) *slotCalls {
	_, cluster := s.rdb.(*redis.ClusterClient)
	return &slotCalls{cluster: cluster, head: head, keysOf: keysOf, callOf: map[int]int{}, groupOf: map[int]int{}}
}

// add appends one piece of work on slot (its group number, then args) to slot's call, and returns that
// call's index.
func (c *slotCalls) add(slot int, args ...any) int {
	ci, ok := c.callOf[slot]
	if !ok {
		if c.cluster || len(c.calls) == 0 {
			c.calls = append(c.calls, scriptCall{Args: slices.Clone(c.head)})
		}
		ci = len(c.calls) - 1
		c.callOf[slot] = ci
		keys := c.keysOf(slot)
		c.calls[ci].Keys = append(c.calls[ci].Keys, keys...)
		c.groupOf[slot] = len(c.calls[ci].Keys) / len(keys)
	}
	c.calls[ci].Args = append(append(c.calls[ci].Args, c.groupOf[slot]), args...)
	return ci
}
