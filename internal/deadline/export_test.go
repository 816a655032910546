package deadline

import (
	"context"
	"hash/crc32"
	"strconv"
	"testing"
	"time"
)

// SetRearmBatch makes RearmType read n entries at a time until tb ends, so a small fleet spans batches.
func SetRearmBatch(tb testing.TB, n int) {
	old := rearmBatch
	rearmBatch = n
	tb.Cleanup(func() { rearmBatch = old })
}

// ClaimStepHashes are the hashes of a claim's scripts, in their order (claimsteps.go).
func ClaimStepHashes() []string {
	var out []string
	for _, s := range claimSteps.all {
		out = append(out, s.Hash())
	}
	return out
}

// DeadlineOf exposes deadlineOf to the benchmarks.
func (s *Store) DeadlineOf(name string, seen time.Time) (int64, bool) {
	return s.deadlineOf(name, seen)
}

// AsLinkedByOlderVersion leaves the links of parents as a version without the named-parents sets wrote
// them: no parent in the sets, and the fleet's parents mark 1.
func (s *Store) AsLinkedByOlderVersion(ctx context.Context, parents ...string) error {
	for _, p := range parents {
		if err := s.rdb.SRem(ctx, s.keys.NamedParents(p), p).Err(); err != nil {
			return err
		}
	}
	return s.rdb.Set(ctx, s.keys.parentsInUse(), 1, 0).Err()
}

// LoseData is what the store does when it finds that Redis lost data (datalost.go).
func (s *Store) LoseData() { s.layouts.NoteLoss() }

// SetNamed marks every parent as being in the named-parents sets.
func (s *Store) SetNamed(ctx context.Context) error {
	return s.rdb.Set(ctx, s.keys.parentsInUse(), "named", 0).Err()
}

const DormantAfter = dormantAfter

var ProbeScriptHash = probeScript.Hash()

func (k Keyspace) Alarms(slot int) string { return k.alarms(slot) }
func (k Keyspace) Causes(slot int) string { return k.causes(slot) }
func (k Keyspace) State(slot int) string  { return k.state(slot) }

func (s *Store) DoubleSlots(ctx context.Context) (Layout, error) { return s.doubleSlots(ctx) }
func (s *Store) DeleteMany(ctx context.Context, devices []string) ([]bool, error) {
	return s.deleteMany(ctx, devices)
}
func (s *Store) TypeIndex(ctx context.Context, name string) (int, error) {
	return s.typeIndex(ctx, name)
}

// ParentsMark is the fleet's parents mark: "named", "1" or "" when absent.
func (s *Store) ParentsMark(ctx context.Context) string {
	return s.rdb.Get(ctx, s.keys.parentsInUse()).Val()
}

// ReclaimTypes runs one reclaim of the type indexes now, whoever's turn it is (typereclaim.go).
func (s *Store) ReclaimTypes(ctx context.Context) (int, error) { return s.reclaimTypes(ctx) }

// The parent links' keys as internal/parents writes them (its keys.go), for the tests here that set up
// what an older version or a data loss left, or count what the links hold.
func (k Keyspace) Children(p string) string { return k.prefix + ":children:{" + p + "}" }
func (k Keyspace) NamedParents(p string) string {
	return k.prefix + ":parents:named:{" + strconv.Itoa(int(crc32.ChecksumIEEE([]byte(p))%64)) + "}"
}
func (k Keyspace) parentsInUse() string { return k.prefix + ":parents:any" }
