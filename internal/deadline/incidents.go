package deadline

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/typeindex"
)

// OpenIncident is an incident whose interruption (or `late`) was reported and that no operator
// acknowledged (an exhausted one stays open), as ScanOpenIncidents reads it from its slot's state hash;
// one committed by a claim whose events are still on their way is not reported yet.
type OpenIncident struct {
	Device string
	// Type is the device's type; a device with its own timeout counts as its type's, as in its events.
	Type string
	// Timeout is what its deadline was set with: its own timeout, else its type's (Options.Timeout).
	Timeout time.Duration
	// WarnAfter is its type's warn_after (0: none): its state's deadline is then the warning (warn.go).
	WarnAfter time.Duration
	State     State
	// Cause is why the incident began when it was not silence; nil for silence.
	Cause *Cause
}

// Late reports an incident reported `late` and not interrupted yet.
func (i OpenIncident) Late() bool { return i.State.Hold == HoldLate && i.State.Next == 0 }

// LastSeen is when the device last signalled: its cause's record of it, else its deadline less its
// warn_after or timeout; zero when that is unknown (≤ 0).
func (i OpenIncident) LastSeen() time.Time {
	if i.Cause != nil {
		return i.Cause.LastSeen
	}
	return i.seenByDeadline()
}

// seenByDeadline is the last signal its deadline implies: the deadline less its warn_after or timeout.
func (i OpenIncident) seenByDeadline() time.Time {
	lead := i.Timeout
	if i.WarnAfter > 0 {
		lead = i.WarnAfter
	}
	if lead <= 0 {
		return time.Time{}
	}
	return i.State.DeadlineTime().Add(-lead)
}

// Deadline is the deadline its events carry: the warning's while it is only late, else last signal +
// timeout.
func (i OpenIncident) Deadline() time.Time {
	if i.WarnAfter <= 0 || i.Late() || i.Timeout <= 0 {
		return i.State.DeadlineTime()
	}
	return i.seenByDeadline().Add(i.Timeout)
}

// ScanOpenIncidents reads one page of slot's open incidents, about count entries of its state hash from
// cursor (0 starts; a returned 0 ends), with HSCAN's guarantees: an incident open for the whole scan is
// returned at least once, and a page may hold none while the scan goes on. It never blocks Redis for
// longer than one page.
func (s *Store) ScanOpenIncidents(ctx context.Context, slot int, cursor uint64, count int) ([]OpenIncident, uint64, error) {
	pipe := s.rdb.Pipeline()
	page := pipe.HScan(ctx, s.keys.state(slot), cursor, "", int64(count))
	records := pipe.HVals(ctx, s.keys.inFlight(slot))
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, 0, fmt.Errorf("deadline: scan the incidents of slot %d: %w", slot, err)
	}
	kv, next := page.Val()
	committed := committedInFlight(records.Val())
	var out []OpenIncident
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == stateGuardField || committed[kv[i]] == kv[i+1] {
			continue
		}
		st, err := decodeState(kv[i+1])
		if err != nil || (st.Next == 0 && st.Hold != HoldLate) || st.Acked {
			continue
		}
		recorded := s.types.Name(ctx, st.TypeIndex)
		typ, _ := typeindex.SplitOwnType(recorded)
		out = append(out, OpenIncident{Device: kv[i], Type: typ, Timeout: s.timeout(recorded),
			WarnAfter: s.warnAfter(recorded), State: st})
	}
	if err := s.attachIncidentCauses(ctx, slot, out); err != nil {
		return nil, 0, err
	}
	return out, next, nil
}

// committedInFlight is what slot's in-flight records (their packed lists) hold as committed, device →
// committed state: such an incident's interruption is stored ahead of its publication (doc.go: commit),
// so it is not reported yet, and a reader that took it for reported would act before the alarm loop has
// judged it (its outage, its parent). The records are few and short-lived.
func committedInFlight(records []string) map[string]string {
	var committed map[string]string
	for _, packed := range records {
		items := strings.Split(packed, packSep)
		for j := 0; j+1 < len(items); j += 2 {
			if committed == nil {
				committed = map[string]string{}
			}
			committed[items[j]] = items[j+1]
		}
	}
	return committed
}

// attachIncidentCauses gives each of one slot's incidents the cause stored for it, in one round trip.
func (s *Store) attachIncidentCauses(ctx context.Context, slot int, incs []OpenIncident) error {
	if len(incs) == 0 {
		return nil
	}
	devices := make([]Device, len(incs))
	for i := range incs {
		devices[i] = Device{ID: incs[i].Device, Incident: &incs[i].State}
	}
	if err := s.fillCauses(ctx, devices, func(int) int { return slot }); err != nil {
		return err
	}
	for i := range incs {
		incs[i].Cause = devices[i].Cause
	}
	return nil
}
