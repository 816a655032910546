package history

import (
	"time"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// Incident is one open-to-close span of one device, as the history keeps it
// (docs/http-api.md#incidents-and-availability). Times are Unix milliseconds; 0 is unset.
type Incident struct {
	// Opened is the opening event's deadline; with FirstKind it names the incident (ID).
	Opened    int64
	FirstKind event.Kind // late, interrupted or suppressed
	// Phase is where the incident stands in the machine of pkg/event; Closed once it ended.
	Phase event.Phase
	// DownFrom is when the device counts as down: the deadline of its first interrupted or suppressed
	// event; 0 while it was only late (a warning is no downtime).
	DownFrom int64
	// Closed is the recovering signal's time, or the deletion's; 0 while open.
	Closed    int64
	Deleted   bool // closed by deleted rather than recovered
	Repeats   int
	Exhausted bool
	AckedAt   int64 // 0: not acknowledged
	AckedBy   string
	Cause     string // event.CauseReported, event.CauseOffline or ""
	Reason    string
	Parent    string
	OutageID  string
}

// ID is the opening event's id.
func (in *Incident) ID(device string) string {
	return event.ID(device, time.UnixMilli(in.Opened), in.FirstKind, 0)
}

// Open reports whether the incident has not ended.
func (in *Incident) Open() bool { return in.Phase != event.Closed }

// DownMs is the incident's downtime up to now (ms): from DownFrom to its close, or to now while open.
func (in *Incident) DownMs(now int64) int64 {
	return overlap(in, 0, now)
}

// overlap is the incident's downtime within [from, to) in ms.
func overlap(in *Incident, from, to int64) int64 {
	if in.DownFrom == 0 {
		return 0
	}
	end := in.Closed
	if end == 0 || end > to {
		end = to
	}
	start := max(in.DownFrom, from)
	return max(end-start, 0)
}

// deviceHistory is everything kept of one device: its incidents, oldest first.
type deviceHistory struct {
	// Groups are the groups the device's day figures are kept under, as of its latest event: grouping
	// ("device_type", "label.<name>") → the device's value. Kept so a change of type or label moves the
	// figures instead of leaving a copy under the old value.
	Groups map[string]string
	// KnownSince is the earliest time the device is known to have existed: its last signal before its
	// first kept incident (else that incident's opening). Availability counts from it.
	KnownSince int64
	Incidents  []Incident
}

// latest is the newest incident, nil when there is none.
func (h *deviceHistory) latest() *Incident {
	if len(h.Incidents) == 0 {
		return nil
	}
	return &h.Incidents[len(h.Incidents)-1]
}
