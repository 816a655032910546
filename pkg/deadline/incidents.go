package deadline

import (
	"context"
	"fmt"
	"time"

	"github.com/heartbeatd/heartbeatd/pkg/config"
)

// OpenIncident is an incident whose interruption was reported and that no operator acknowledged (an
// exhausted one stays open), as ScanOpenIncidents reads it from its slot's state hash.
type OpenIncident struct {
	Device string
	// Type is the device's type; a device with its own timeout counts as its type's, as in its events.
	Type string
	// Timeout is what its deadline was set with: its own timeout, else its type's (Options.Timeout).
	Timeout time.Duration
	State   State
}

// LastSeen is when the device last signalled: its deadline less its timeout; zero when the timeout is
// unknown (≤ 0).
func (i OpenIncident) LastSeen() time.Time {
	if i.Timeout <= 0 {
		return time.Time{}
	}
	return i.State.DeadlineTime().Add(-i.Timeout)
}

// ScanOpenIncidents reads one page of slot's open incidents, about count entries of its state hash from
// cursor (0 starts; a returned 0 ends), with HSCAN's guarantees: an incident open for the whole scan is
// returned at least once, and a page may hold none while the scan goes on. It never blocks Redis for
// longer than one page.
func (s *Store) ScanOpenIncidents(ctx context.Context, slot int, cursor uint64, count int) ([]OpenIncident, uint64, error) {
	kv, next, err := s.rdb.HScan(ctx, s.keys.State(slot), cursor, "", int64(count)).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("deadline: scan the incidents of slot %d: %w", slot, err)
	}
	var out []OpenIncident
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == stateGuardField {
			continue
		}
		st, err := decodeState(kv[i+1])
		if err != nil || st.Next == 0 || st.Acked {
			continue
		}
		recorded := s.TypeName(ctx, st.TypeIndex)
		out = append(out, OpenIncident{Device: kv[i], Type: config.BaseType(recorded), Timeout: s.timeout(recorded), State: st})
	}
	return out, next, nil
}
