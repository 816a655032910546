package typeindex

import (
	"strconv"
	"strings"
	"time"

	"github.com/heartbeatd/heartbeatd/internal/ident"
)

// A score's type index names the type and the lead it was written with (its timeout, or its warn_after
// when it has one): the registry holds "<recorded name><timedSep><lead ms>", and a reload or a
// registration that changes the lead gives the name a new index. A signal of the same index is written
// with ZADD GT, so an older signal never pulls a deadline back; one whose index differs from the stored
// one (a changed timeout, a new own timeout, another type) is compared by the signal times instead,
// the stored one being its deadline less its index's lead, and is written even when its deadline is
// earlier (internal/deadline, retime.go). The lead also gives a device's last signal after the change.
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
	_, own := SplitOwnType(name)
	return own, own > 0
}

// IdentityLead is the lead a registry name's scores were written with; known is false for a configured
// type's name an older version registered.
func IdentityLead(full string) (name string, lead time.Duration, known bool) {
	if name, lead, timed := splitTimed(full); timed {
		return name, lead, true
	}
	lead, known = legacyLead(full)
	return full, lead, known
}

// A device registered with its own timeout (docs/http-api.md, "Device registry") is recorded under a
// type name of its own, "<type>@<timeout>", so that its score's type index says which timeout its
// deadline was set with. The name never leaves the deadline store (internal/deadline, owntimeout.go).
// Configured type names cannot hold the mark (ident.TypeProblem).
const ownTypeSep = ident.OwnTimeoutMark

// OwnTypeName is the name a device with its own timeout is recorded under; typ itself for a timeout of 0,
// the type's own.
func OwnTypeName(typ string, timeout time.Duration) string {
	if timeout <= 0 {
		return typ
	}
	if typ == "" {
		typ = DefaultType
	}
	return typ + ownTypeSep + timeout.String()
}

// SplitOwnType splits a recorded type name into the configured type and the own timeout (0 for a
// configured type's name).
func SplitOwnType(name string) (typ string, own time.Duration) {
	i := strings.LastIndex(name, ownTypeSep)
	if i < 0 {
		return name, 0
	}
	d, err := time.ParseDuration(name[i+1:])
	if err != nil || d <= 0 {
		return name, 0
	}
	return name[:i], d
}
