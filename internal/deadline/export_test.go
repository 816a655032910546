package deadline

import (
	"context"
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
		if err := s.rdb.SRem(ctx, s.keys.namedParents(p), p).Err(); err != nil {
			return err
		}
	}
	return s.rdb.Set(ctx, s.keys.parentsInUse(), 1, 0).Err()
}

// LoseData is what the store does when it finds that Redis lost data (datalost.go).
func (s *Store) LoseData() { s.dataLost() }

// Peek is peek: what an idle look at slots finds.
func (s *Store) Peek(ctx context.Context, slots []int, opts ClaimOptions) (bool, ClaimResult, error) {
	return s.peek(ctx, slots, opts)
}

// SetNamed marks every parent as being in the named-parents sets.
func (s *Store) SetNamed(ctx context.Context) error {
	return s.rdb.Set(ctx, s.keys.parentsInUse(), parentsNamed, 0).Err()
}

// The package's own parts its black-box tests drive directly (the daemon reaches them only through the
// store's and the scanner's loops).
var (
	Assign = assign
	Owner  = owner
)

const DormantAfter = dormantAfter

func (k Keyspace) Alarms(slot int) string       { return k.alarms(slot) }
func (k Keyspace) Causes(slot int) string       { return k.causes(slot) }
func (k Keyspace) State(slot int) string        { return k.state(slot) }
func (k Keyspace) Children(p string) string     { return k.children(p) }
func (k Keyspace) NamedParents(p string) string { return k.namedParents(p) }
func (k Keyspace) Parents(child string) string  { return k.parents(child) }
func (k Keyspace) Flaps(slot int) string        { return k.flaps(slot) }
func (k Keyspace) Replicas() string             { return k.replicas() }

func (s *Store) Layout() Layout                                  { return s.currentLayout() }
func (s *Store) DoubleSlots(ctx context.Context) (Layout, error) { return s.doubleSlots(ctx) }
func (s *Store) RetireLayout(ctx context.Context, retireAfter time.Duration) (bool, error) {
	return s.retireLayout(ctx, retireAfter)
}
func (s *Store) DeleteMany(ctx context.Context, devices []string) ([]bool, error) {
	return s.deleteMany(ctx, devices)
}
func (s *Store) Registered(ctx context.Context, devices []string) ([]bool, error) {
	return s.registered(ctx, devices)
}
func (s *Store) TypeIndex(ctx context.Context, name string) (int, error) {
	return s.typeIndex(ctx, name)
}
func (s *Store) ForgetSilent(ctx context.Context, slot int, cursor uint64, count int, before time.Time) (uint64, []string, error) {
	return s.forgetSilent(ctx, slot, cursor, count, before)
}
func (s *Store) SweepDormant(ctx context.Context, slot int, cursor uint64, count int) (uint64, int, error) {
	return s.sweepDormant(ctx, slot, cursor, count)
}
func (w *Sweeper) Pass(ctx context.Context) error { return w.pass(ctx) }
func (l Layout) Moving() bool                     { return l.moving() }

// RepairNamedParents is what each sweeper pass runs after the dormant sweep (parentrepair.go).
func (s *Store) RepairNamedParents(ctx context.Context) (bool, error) {
	return s.repairNamedParents(ctx)
}

// ParentsMark is the fleet's parents mark: "named", "1" or "" when absent.
func (s *Store) ParentsMark(ctx context.Context) string {
	return s.rdb.Get(ctx, s.keys.parentsInUse()).Val()
}

// ReclaimTypes runs one reclaim of the type indexes now, whoever's turn it is (typereclaim.go).
func (s *Store) ReclaimTypes(ctx context.Context) (int, error) { return s.reclaimTypes(ctx) }
