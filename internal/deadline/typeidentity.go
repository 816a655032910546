package deadline

import (
	"context"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/typeindex"
)

// A score's type index names the type and the lead it was written with (internal/typeindex, names.go);
// these resolve the names a signal carries or a score holds to the index they are written with now.

// resolved is the type index a signal of name is written with now, the name that index stands for (the
// default type for a name that is not configured) and its lead.
type resolved struct {
	idx  int
	name string
	lead time.Duration
}

// resolve is resolved for name ("" and names not configured: the default type).
func (s *Store) resolve(ctx context.Context, name string) (resolved, error) {
	c, known, cached := s.types.Cached(name)
	if !known {
		name = DefaultType
		c, _, cached = s.types.Cached(name)
	}
	lead := AsStored(s.lead(name))
	if cached && c.Lead == lead { // every signal but the first of a name under a new lead
		return resolved{idx: c.Idx, name: name, lead: lead}, nil
	}
	idx, _, err := s.types.Current(ctx, name, lead)
	return resolved{idx: idx, name: name, lead: lead}, err
}

// resolveRecorded is resolve for the type recorded at index idx (an untyped signal's device): one
// lookup while the name's lead stays what it was.
func (s *Store) resolveRecorded(ctx context.Context, idx int) (resolved, error) {
	if r, ok := s.types.ResolvedAt(idx); ok && AsStored(s.lead(r.Name)) == r.Lead {
		return resolved{idx: r.Idx, name: r.Name, lead: r.Lead}, nil
	}
	r, err := s.resolve(ctx, s.types.Name(ctx, idx))
	if err == nil {
		s.types.SetResolvedAt(idx, typeindex.Resolved{Idx: r.idx, Name: r.name, Lead: r.lead})
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

// identityLeads is the lead every known type index was written with (typeindex.IdentityLead; else the
// lead its name has now), for the scripts that compare signal times.
func (s *Store) identityLeads(ctx context.Context) typeTable {
	names := s.types.FullNames()
	t := make(typeTable, len(names))
	for i, full := range names {
		name, lead, known := typeindex.IdentityLead(full)
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
	names := s.types.Names()
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
	name, lead, known := typeindex.IdentityLead(s.types.FullName(ctx, idx))
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
