package deadline

import (
	"context"
	"fmt"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/typeindex"
)

// A device registered with its own timeout (docs/http-api.md, "Device registry") is recorded under a
// type name of its own, "<type>@<timeout>" (typeindex.OwnTypeName), so that its score's type index says
// which timeout its deadline was set with. That name never leaves the store: claims, devices and
// incidents carry the configured type and the own timeout apart, and the policy callbacks (Options) are
// asked about configured types only. A recorded name's policy is its configured type's under
// config.Policy.WithOwnTimeout, the one statement of that rule, which internal/alarm decides with too.

func (s *Store) timeout(name string) time.Duration {
	typ, own := typeindex.SplitOwnType(name)
	if own <= 0 {
		return s.typeTimeout(typ)
	}
	return config.Policy{Timeout: s.typeTimeout(typ)}.WithOwnTimeout(own).Timeout
}

func (s *Store) warnAfter(name string) time.Duration {
	typ, own := typeindex.SplitOwnType(name)
	if own <= 0 {
		return s.typeWarnAfter(typ)
	}
	return config.Policy{WarnAfter: s.typeWarnAfter(typ)}.WithOwnTimeout(own).WarnAfter
}

func (s *Store) repeatEvery(name string) time.Duration {
	typ, _ := typeindex.SplitOwnType(name)
	return s.typeRepeatEvery(typ)
}

// expected is Options.Expected for a recorded type name: false for a device's own timeout, which
// replaces its type's schedule (config.Policy.WithOwnTimeout).
func (s *Store) expected(name string, seen time.Time) (time.Time, bool) {
	typ, own := typeindex.SplitOwnType(name)
	if s.typeExpected == nil || own > 0 {
		return time.Time{}, false
	}
	return s.typeExpected(typ, seen)
}

// typeOf is the configured type and own timeout a type index stands for.
func (s *Store) typeOf(ctx context.Context, idx int) (typ string, own time.Duration) {
	return typeindex.SplitOwnType(s.types.Name(ctx, idx))
}

// claimTypeOf is typeOf for a claim, which the alarm loop acts on: a registry that cannot be read is an
// error (the claim is tried again), never the default type.
func (s *Store) claimTypeOf(ctx context.Context, idx int) (typ string, own time.Duration, err error) {
	name, err := s.types.LookupName(ctx, idx)
	if err != nil {
		return "", 0, fmt.Errorf("deadline: type index %d: %w", idx, err)
	}
	typ, own = typeindex.SplitOwnType(name)
	return typ, own, nil
}

// recordedType is the name the claim's device is recorded under.
func (c Claim) recordedType() string { return typeindex.OwnTypeName(c.Type, c.OwnTimeout) }

// recordedType is the name the device is recorded under.
func (d Device) recordedType() string { return typeindex.OwnTypeName(d.Type, d.OwnTimeout) }
