package deadline

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// A score's type index names the type and the lead it was written with (its timeout, or its warn_after
// when it has one): the registry holds "<recorded name><timedSep><lead ms>", and a reload or a
// registration that changes the lead gives the name a new index. A signal of the same index is written
// with ZADD GT, so an older signal never pulls a deadline back; one whose index differs from the stored
// one (a changed timeout, a new own timeout, another type) is compared by the signal times instead,
// the stored one being its deadline less its index's lead, and is written even when its deadline is
// earlier (retime.go). The lead also gives a device's last signal after the change (lastSignalOf).
//
// A name registered by a version before this one has no lead: a per-device timeout's ("<type>@<timeout>")
// is its own timeout (legacyLead), and the name stands for that lead still; a configured type's scores
// are taken as written under the lead its type has now, as that version took them.

// timedSep separates a recorded name from its lead in the registry: a control character, which no type
// name holds (docs/signals.md), so a timed name never collides with a configured one.
const timedSep = "\x1f"

// timedName is the registry name of recorded name under lead.
func timedName(name string, lead time.Duration) string {
	return name + timedSep + strconv.FormatInt(lead.Milliseconds(), 10)
}

// splitTimed splits a registry name into the recorded name and its lead; timed is false for a name
// without one.
func splitTimed(full string) (name string, lead time.Duration, timed bool) {
	i := strings.LastIndex(full, timedSep)
	if i < 0 {
		return full, 0, false
	}
	ms, err := strconv.ParseInt(full[i+len(timedSep):], 10, 64)
	if err != nil || ms < 0 {
		return full, 0, false
	}
	return full[:i], time.Duration(ms) * time.Millisecond, true
}

// legacyLead is the lead of a per-device timeout's name as an older version registered it, without a
// lead: its own timeout, what it wrote its scores with unless its type warned earlier.
func legacyLead(name string) (time.Duration, bool) {
	if strings.Contains(name, timedSep) {
		return 0, false
	}
	_, own := splitOwnType(name)
	return own, own > 0
}

// identityLead is the lead a registry name's scores were written with; known is false for a configured
// type's name an older version registered.
func identityLead(full string) (name string, lead time.Duration, known bool) {
	if name, lead, timed := splitTimed(full); timed {
		return name, lead, true
	}
	lead, known = legacyLead(full)
	return full, lead, known
}

// currentIndex is the index a recorded name is written with under the lead it had when last asked.
type currentIndex struct {
	lead time.Duration
	idx  int
	full bool // no index was left for it: idx is a fallback (typeRegistry.current)
}

// resolved is the type index a signal of name is written with now, the name that index stands for (the
// default type for a name that is not configured) and its lead.
type resolved struct {
	idx  int
	name string
	lead time.Duration
}

// resolve is resolved for name ("" and names not configured: the default type).
func (s *Store) resolve(ctx context.Context, name string) (resolved, error) {
	c, known, cached := s.types.cached(name)
	if !known {
		name = DefaultType
		c, _, cached = s.types.cached(name)
	}
	lead := AsStored(s.lead(name))
	if cached && c.lead == lead { // every signal but the first of a name under a new lead
		return resolved{idx: c.idx, name: name, lead: lead}, nil
	}
	idx, _, err := s.types.current(ctx, name, lead)
	return resolved{idx: idx, name: name, lead: lead}, err
}

// resolvedAt is what the type recorded at idx resolved to when last asked (ok false: not yet).
func (r *typeRegistry) resolvedAt(idx int) (res resolved, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if idx < 0 || idx >= len(r.byRecorded) {
		return resolved{}, false
	}
	res = r.byRecorded[idx]
	return res, res.name != ""
}

func (r *typeRegistry) setResolvedAt(idx int, res resolved) {
	if idx < 0 || idx >= MaxTypes {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byRecorded == nil {
		r.byRecorded = make([]resolved, MaxTypes)
	}
	r.byRecorded[idx] = res
}

// resolveRecorded is resolve for the type recorded at index idx (an untyped signal's device): one
// lookup while the name's lead stays what it was.
func (s *Store) resolveRecorded(ctx context.Context, idx int) (resolved, error) {
	if r, ok := s.types.resolvedAt(idx); ok && AsStored(s.lead(r.name)) == r.lead {
		return r, nil
	}
	r, err := s.resolve(ctx, s.types.name(ctx, idx))
	if err == nil {
		s.types.setResolvedAt(idx, r)
	}
	return r, err
}

// deadlineAt is the deadline a signal at seen sets for recorded name of lead: its next expected time
// for a type with expected times (docs/schedules.md), else seen + lead.
func (s *Store) deadlineAt(name string, lead time.Duration, seen time.Time) (ms int64, expected bool) {
	if s.typeExpected != nil {
		if dl, ok := s.expected(name, seen); ok {
			return dl.UnixMilli(), true
		}
	}
	return seen.UnixMilli() + lead.Milliseconds(), false
}

// identityLeads is the lead every known type index was written with (identityLead; else the lead its
// name has now), for the scripts that compare signal times.
func (s *Store) identityLeads(ctx context.Context) typeTable {
	names := s.types.fullNames()
	t := make(typeTable, len(names))
	for i, full := range names {
		name, lead, known := identityLead(full)
		if !known {
			lead = AsStored(s.lead(cmpDefault(name)))
		}
		t[i] = lead
	}
	return t
}

// currentIndexes maps every known type index to the index its name is written with now: itself, unless
// the name's lead changed since it was written (or the name is no longer configured).
func (s *Store) currentIndexes(ctx context.Context) ([]int, error) {
	names := s.types.names()
	out := make([]int, len(names))
	for i, name := range names {
		r, err := s.resolve(ctx, cmpDefault(name))
		if err != nil {
			return nil, err
		}
		out[i] = r.idx
	}
	return out, nil
}

func cmpDefault(name string) string {
	if name == "" {
		return DefaultType
	}
	return name
}

// deviceLastSignal is lastSignalOf for d's deadline (its open incident's when it has one) of type idx.
func (s *Store) deviceLastSignal(ctx context.Context, d Device, idx int) time.Time {
	if d.Incident != nil && d.Deadline.IsZero() {
		return s.lastSignalOf(ctx, idx, d.Incident.Deadline)
	}
	if d.Deadline.IsZero() {
		return time.Time{}
	}
	return s.lastSignalOf(ctx, idx, d.Deadline.UnixMilli())
}

// lastSignalOf is the last signal behind deadline dl (ms) of type index idx when idx was written under
// another lead than its name has now; zero when the two agree, and the policy's lead gives it.
func (s *Store) lastSignalOf(ctx context.Context, idx int, dl int64) time.Time {
	name, lead, known := identityLead(s.types.fullName(ctx, idx))
	if !known || dl <= 0 || lead == AsStored(s.lead(name)) {
		return time.Time{}
	}
	if s.typeExpected != nil {
		if _, ok := s.expected(name, s.now()); ok {
			return time.Time{} // recorded apart (expected.go)
		}
	}
	return time.UnixMilli(dl - lead.Milliseconds())
}
