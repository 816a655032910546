package history

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/heartbeatd/heartbeatd/pkg/event"
)

// The stored form of a device's history is binary, so an incident costs Redis about a dozen bytes plus
// its strings (docs/benchmarks.md): a version byte, the groups, the incidents, oldest first, then
// known-since. Times after an incident's opening are deltas from it, known-since a delta back from the
// first incident's opening; what is most often empty or zero (the strings, repeats, a down time from the
// opening itself) is a flag bit instead of a byte. Integers are uvarints, strings a uvarint length and
// their bytes. A device's value stays under 45 bytes with one plain incident, which Redis keeps in one
// allocation with its object (an embedded string).
const codecVersion = 2

// The flag bits of one stored incident.
const (
	flagClosed = 1 << iota
	flagDeleted
	flagExhausted
	flagAcked
	flagDown
	flagReason
	flagParent
	flagOutage
)

// The bits of the codes byte above the kind (bits 4–5), the phase (2–3) and the cause (0–1).
const (
	codeRepeats   = 1 << 6 // repeats follow (else 0)
	codeDownLater = 1 << 7 // the down time starts after the opening: its delta follows
)

var kindCodes = []event.Kind{event.Late, event.Interrupted, event.Suppressed}

func kindCode(k event.Kind) byte {
	for i, c := range kindCodes {
		if c == k {
			return byte(i)
		}
	}
	return 1
}

var causeCodes = []string{"", event.CauseReported, event.CauseOffline}

func causeCode(c string) byte {
	for i, v := range causeCodes {
		if v == c {
			return byte(i)
		}
	}
	return 0
}

func encode(h *deviceHistory) []byte {
	b := make([]byte, 0, 16+32*len(h.Groups)+len(h.Incidents)*16)
	b = append(b, codecVersion)
	b = binary.AppendUvarint(b, uint64(len(h.Groups)))
	for _, dim := range sortedKeys(h.Groups) {
		stored := dim
		if dim == dimType { // every device has it: stored as "", 11 bytes less on each
			stored = ""
		}
		b = appendString(appendString(b, stored), h.Groups[dim])
	}
	b = binary.AppendUvarint(b, uint64(len(h.Incidents)))
	for i := range h.Incidents {
		in := &h.Incidents[i]
		flags := bit(!in.Open(), flagClosed) | bit(in.Deleted, flagDeleted) | bit(in.Exhausted, flagExhausted) |
			bit(in.AckedAt != 0, flagAcked) | bit(in.DownFrom != 0, flagDown) | bit(in.Reason != "", flagReason) |
			bit(in.Parent != "", flagParent) | bit(in.OutageID != "", flagOutage)
		downLater := in.DownFrom != 0 && in.DownFrom != in.Opened
		codes := kindCode(in.FirstKind)<<4 | byte(in.Phase)<<2 | causeCode(in.Cause) | bit(in.Repeats != 0, codeRepeats) |
			bit(downLater, codeDownLater)
		b = binary.AppendUvarint(b, uint64(in.Opened))
		b = append(b, flags, codes)
		if downLater {
			b = binary.AppendUvarint(b, uint64(max(in.DownFrom-in.Opened, 0)))
		}
		if !in.Open() {
			b = binary.AppendUvarint(b, uint64(max(in.Closed-in.Opened, 0)))
		}
		if in.Repeats != 0 {
			b = binary.AppendUvarint(b, uint64(in.Repeats))
		}
		if in.AckedAt != 0 {
			b = binary.AppendUvarint(b, uint64(max(in.AckedAt-in.Opened, 0)))
			b = appendString(b, in.AckedBy)
		}
		for _, s := range []string{in.Reason, in.Parent, in.OutageID} {
			if s != "" {
				b = appendString(b, s)
			}
		}
	}
	var first int64 // known-since, back from the first incident's opening (or as it is without one)
	if len(h.Incidents) > 0 {
		first = h.Incidents[0].Opened
	}
	return binary.AppendVarint(b, first-h.KnownSince)
}

var errCorrupt = errors.New("history: corrupt stored incidents")

func decode(b []byte) (*deviceHistory, error) {
	if len(b) == 0 {
		return &deviceHistory{}, nil
	}
	if b[0] != codecVersion {
		return nil, fmt.Errorf("%w: version %d", errCorrupt, b[0])
	}
	r := reader{b: b[1:]}
	h := &deviceHistory{Groups: map[string]string{}}
	for n := r.uvarint(); n > 0 && r.err == nil; n-- {
		dim := r.string()
		if dim == "" {
			dim = dimType
		}
		h.Groups[dim] = r.string()
	}
	n := r.uvarint()
	if n > uint64(len(b)) { // every incident takes bytes: a count above that is garbage
		return nil, errCorrupt
	}
	h.Incidents = make([]Incident, n)
	for i := range h.Incidents {
		in := &h.Incidents[i]
		in.Opened = int64(r.uvarint())
		flags, codes := r.byte(), r.byte()
		in.FirstKind = kindCodes[min(int(codes>>4&3), len(kindCodes)-1)]
		in.Phase = event.Phase((codes >> 2) & 3)
		in.Cause = causeCodes[min(int(codes&3), len(causeCodes)-1)]
		if flags&flagDown != 0 {
			in.DownFrom = in.Opened
			if codes&codeDownLater != 0 {
				in.DownFrom += int64(r.uvarint())
			}
		}
		if flags&flagClosed != 0 {
			in.Closed, in.Phase = in.Opened+int64(r.uvarint()), event.Closed
		}
		in.Deleted, in.Exhausted = flags&flagDeleted != 0, flags&flagExhausted != 0
		if codes&codeRepeats != 0 {
			in.Repeats = int(r.uvarint())
		}
		if flags&flagAcked != 0 {
			in.AckedAt = in.Opened + int64(r.uvarint())
			in.AckedBy = r.string()
		}
		for _, f := range []struct {
			flag byte
			to   *string
		}{{flagReason, &in.Reason}, {flagParent, &in.Parent}, {flagOutage, &in.OutageID}} {
			if flags&f.flag != 0 {
				*f.to = r.string()
			}
		}
	}
	var first int64
	if n > 0 {
		first = h.Incidents[0].Opened
	}
	h.KnownSince = first - r.varint()
	if r.err != nil {
		return nil, r.err
	}
	return h, nil
}

func bit(on bool, flag byte) byte {
	if on {
		return flag
	}
	return 0
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// reader reads the stored form; the first short read sets err and every read after it returns zero.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 { return readNumber(r, binary.Uvarint) }

func (r *reader) varint() int64 { return readNumber(r, binary.Varint) }

// readNumber reads one varint of r with read (binary.Uvarint, binary.Varint).
func readNumber[T uint64 | int64](r *reader, read func([]byte) (T, int)) T {
	if r.err != nil {
		return 0
	}
	v, n := read(r.b)
	if n <= 0 {
		r.err = errCorrupt
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.err = errCorrupt
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) string() string {
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)) {
		r.err = errCorrupt
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// sortedKeys lists m's keys in order, so equal histories encode to equal bytes (the write compares them).
func sortedKeys(m map[string]string) []string {
	if len(m) == 1 { // the common case: a type, no kept label
		for k := range m {
			return []string{k}
		}
	}
	return slices.Sorted(maps.Keys(m))
}
