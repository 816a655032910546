package typememory

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRememberedTypesTable: entries survive growth and probing past neighbours whose hashes share their
// low bits, forgetting hides an entry without losing its neighbours, and the hash 0 is a key like others.
func TestRememberedTypesTable(t *testing.T) {
	var tab rememberedTypes
	_, ok := tab.get(42)
	require.False(t, ok, "empty")
	tab.forget(7) // forgetting what was never there adds nothing
	require.Zero(t, tab.n)

	const n = 5000
	key := func(i int) uint64 { return uint64(i) << 40 } // equal low bits: every key probes past the others
	for i := range n {
		tab.put(key(i), typeEntry{index: uint16(i % 1024), until: uint32(i + 1)})
	}
	require.Equal(t, n, tab.n)
	require.GreaterOrEqual(t, len(tab.slots), 2*n, "grown at half full")
	for i := range n {
		e, ok := tab.get(key(i))
		require.True(t, ok, i)
		require.Equal(t, typeEntry{index: uint16(i % 1024), until: uint32(i + 1)}, e)
	}
	tab.forget(key(10))
	tab.forget(key(n + 1)) // a key never put: nothing changes
	require.Equal(t, n, tab.n)
	e, ok := tab.get(key(10))
	require.True(t, ok)
	require.Zero(t, e.until, "forgotten: present but never trusted")
	e, ok = tab.get(key(11))
	require.True(t, ok, "its neighbours stay reachable")
	require.Equal(t, uint32(12), e.until)

	tab.put(0, typeEntry{index: 3, until: 9})
	e, ok = tab.get(0)
	require.True(t, ok)
	require.Equal(t, uint16(3), e.index)
	_, ok = tab.get(1<<63 | 5)
	require.False(t, ok)
}

// BenchmarkTypeMemoryLookup: the remembered-type lookup of an untyped batch (1024 signals) in a memory
// of 2M devices, each a cache miss: ns per signal.
func BenchmarkTypeMemoryLookup(b *testing.B) {
	const fleet, batch = 2_000_000, 1024
	m := New(nil, "")
	ids := make([]string, fleet)
	learned := make([]Learned, 0, fleet)
	for i := range ids {
		ids[i] = "device-" + strconv.Itoa(i)
		learned = append(learned, Learned{Device: ids[i], Index: i % 7})
	}
	m.Remember(learned, 1_000)
	order := rand.New(rand.NewPCG(1, 2)).Perm(fleet)
	for _, random := range []bool{false, true} {
		b.Run(map[bool]string{false: "periodic", true: "random"}[random], func(b *testing.B) {
			found, next := 0, 0
			for b.Loop() {
				from := next
				next = (next + batch) % (fleet - batch)
				m.Lookup(func(yield func(int, string) bool) {
					for i := from; i < from+batch; i++ {
						id := ids[i]
						if random {
							id = ids[order[i]]
						}
						if !yield(i, id) {
							return
						}
					}
				}, 1_001, func(int, int) { found++ })
			}
			if found != b.N*batch {
				b.Fatalf("found %d of %d", found, b.N*batch)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/signal")
		})
	}
}
