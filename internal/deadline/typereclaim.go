package deadline

import (
	"context"
	"fmt"
	"strconv"

	"github.com/heartbeatd/heartbeatd/internal/loop"
	"github.com/heartbeatd/heartbeatd/internal/typeindex"
)

// maybeReclaimTypes reclaims when the registry is at least typeindex.ReclaimAt full (always when full) and no
// replica took the turn lately (typeindex.Registry.TakeReclaimTurn). It returns how many indexes it released (free to take now).
func (s *Store) maybeReclaimTypes(ctx context.Context, full bool) (int, error) {
	if !full && s.types.Count() < typeindex.ReclaimAt {
		return 0, nil
	}
	if ok, err := s.types.TakeReclaimTurn(ctx, s.now()); err != nil || !ok {
		return 0, err
	}
	return s.reclaimTypes(ctx)
}

// reclaimTypes scans the slots for the type indexes in use, then takes each index's next step
// (typeindex.Registry.Retire). It returns how many indexes it released.
func (s *Store) reclaimTypes(ctx context.Context) (int, error) {
	began := s.now()
	used, err := s.typesInUse(ctx)
	if err != nil {
		return 0, err
	}
	written, err := s.writtenIndexes(ctx)
	if err != nil {
		return 0, err
	}
	freed, released, err := s.types.Retire(ctx, began, &used, written)
	if err == nil && freed > 0 {
		err = s.syncTypes(ctx, true)
	}
	return released, err
}

// typesInUse scans every slot's deadlines set, then its state hash, for the type indexes their scores
// and states hold: in that order, so a device a claim moves from one to the other meanwhile is seen.
func (s *Store) typesInUse(ctx context.Context) ([MaxTypes]bool, error) {
	var used [MaxTypes]bool
	for slot := range s.Slots() {
		err := s.scanSlot(ctx, slot, false, loop.Pacer{}, func(_, v string) {
			score, _ := strconv.ParseFloat(v, 64)
			_, idx := scoreDeadline(score)
			used[idx%MaxTypes] = true
		})
		if err == nil {
			err = s.scanSlot(ctx, slot, true, loop.Pacer{}, func(field, v string) {
				if st, err := decodeState(v); err == nil && field != stateGuardField {
					used[st.TypeIndex%MaxTypes] = true
				}
			})
		}
		if err != nil {
			return used, fmt.Errorf("deadline: reclaim type indexes: %w", err)
		}
	}
	return used, nil
}

// writtenIndexes are the indexes this replica writes new scores with: the configured types' and the
// per-device timeouts' under their current leads.
func (s *Store) writtenIndexes(ctx context.Context) (map[int]bool, error) {
	names := s.types.ConfiguredNames()
	for _, name := range s.overrides.Current() {
		names = append(names, name)
	}
	out := map[int]bool{0: true}
	for _, name := range names {
		r, err := s.resolve(ctx, name)
		if err != nil {
			return nil, err
		}
		out[r.idx] = true
	}
	return out, nil
}

// syncTypes rebuilds the registry's cache when its version in Redis moved (or always, when force), and
// then forgets the types the store remembered: a freed index may name another type from now on.
func (s *Store) syncTypes(ctx context.Context, force bool) error {
	rebuilt, err := s.types.Sync(ctx, force)
	if rebuilt {
		s.typeMem.ForgetAll()
	}
	return err
}
