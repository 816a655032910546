package deadline

import (
	"context"
	"fmt"
	"time"
)

// Retention (docs/configuration.md, "retention"): a device silent that long and not registered is forgotten
// (its incident, alarm entry and links deleted), so a fleet's turnover does not grow Redis forever. A
// registered device is expected: it is never forgotten, however long it stays silent.

// ForgetSilent looks at one page of slot's open incidents (an HSCAN step from cursor of about count
// fields) and forgets the devices whose incident's deadline is before `before`, that have not signalled
// since and are not registered. It returns the next cursor (0 at the end) and the devices forgotten.
func (s *Store) ForgetSilent(ctx context.Context, slot int, cursor uint64, count int, before time.Time) (uint64, []string, error) {
	fields, next, err := s.rdb.HScan(ctx, s.keys.state(slot), cursor, "", int64(count)).Result()
	if err != nil {
		return 0, nil, fmt.Errorf("deadline: retention slot %d: %w", slot, err)
	}
	var old []string
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i] == stateGuardField {
			continue
		}
		st, err := decodeState(fields[i+1])
		if err == nil && st.DeadlineTime().Before(before) {
			old = append(old, fields[i])
		}
	}
	if len(old) == 0 {
		return next, nil, nil
	}
	silent, err := s.Silent(ctx, old)
	if err != nil {
		return 0, nil, err
	}
	registered, err := s.registry.Registered(ctx, old)
	if err != nil {
		return 0, nil, err
	}
	var forgotten []string
	for i, dev := range old {
		if silent[i] && !registered[i] {
			forgotten = append(forgotten, dev)
		}
	}
	if _, err := s.deleteMany(ctx, forgotten); err != nil {
		return 0, nil, err
	}
	return next, forgotten, nil
}
