package ingest

import (
	"hash/crc32"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/heartbeatd/heartbeatd/internal/config"
	"github.com/heartbeatd/heartbeatd/internal/deadline"
	"github.com/heartbeatd/heartbeatd/internal/idhash"
)

// Timeout advice (docs/http-api.md, "Stats": ?advice=true) is read from a fixed sample of the fleet, so
// that the signal path of a device outside it costs one checksum of its id and memory stays bounded under
// any rate and any number of ids.
const (
	// adviceSampleEvery: a device is in the sample when crc32c(id) % adviceSampleEvery == 0, the same
	// devices on every replica and after every restart.
	adviceSampleEvery = 64
	// adviceMaxDevices is how many sampled devices of one type are followed at a time.
	adviceMaxDevices = 1024
	// adviceMaxIntervals is how many intervals a type keeps; the newest replace the oldest.
	adviceMaxIntervals = 4096
	// adviceMinSamples is how many intervals a type needs before a timeout is suggested: a p99 of fewer
	// is little more than the largest one seen.
	adviceMinSamples = 100

	// adviceSlotBits sizes the table of followed devices shared by every type (384 KiB, allocated on the
	// first sampled signal); adviceMaxDevices keeps one busy type from taking all of it.
	adviceSlotBits = 14
	// adviceForget: a followed device silent this long has left the sample: its slot may go to another
	// device, and its next signal starts over instead of adding a gap that is an absence, not a cadence.
	adviceForget = 24 * time.Hour
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Sampled reports whether device is in the timeout-advice sample.
func Sampled(device string) bool {
	// The checksum only reads the bytes: no copy of the id on the signal path.
	b := unsafe.Slice(unsafe.StringData(device), len(device))
	return crc32.Checksum(b, castagnoli)%adviceSampleEvery == 0
}

// Intervals keeps the observed signal intervals of the sampled devices, per device type, on this replica.
//
// The observed interval of a device is the time from one of its signal times to the next (the payload's
// ts, else the transport's timestamp or receive time: what its deadline counts from), taken where the
// chain accepts a valid signal. Coalesced signals count, since coalescing only skips a Redis write and
// the timeout must cover how often the device really signals; a signal not newer than the device's
// latest (out of order, replayed) adds none, as it moves no deadline; a late one counts from its own ts,
// so the interval is the device's cadence, not how long delivery took. A signal that names no type
// counts under the type the same device last named, else under default, as Redis records it (docs/signals.md);
// a device typed only by PUT /v1/devices/{id} whose signals never name one counts under default.
// With several replicas each sees the signals it reads, so its advice is its share of the sample.
//
// Memory is fixed: a table of followed devices (1<<adviceSlotBits), at most adviceMaxDevices of one type,
// and adviceMaxIntervals intervals per type, for at most deadline.MaxTypes types. A sampled id that
// finds its slot held by a device that signalled within adviceForget is not followed, so a flood of new
// ids displaces nobody and grows nothing.
type Intervals struct {
	mu    sync.Mutex
	slots []followed // nil until the first sampled signal
	types []*typeIntervals
	index map[string]uint16 // type name → its position in types + 1
}

// followed is one sampled device in the table.
type followed struct {
	key  uint64 // hash of the device id; 0: free
	last int64  // its latest signal time (Unix ns): where the next interval starts
	typ  uint16 // its type's position in Intervals.types + 1
}

// typeIntervals are one type's newest intervals.
type typeIntervals struct {
	name    string
	devices int // slots it holds
	ring    []time.Duration
	next    int // where the next interval goes once ring is full
}

func newIntervals() *Intervals { return &Intervals{index: map[string]uint16{}} }

// Intervals is the chain's sample of signal intervals, for the timeout advice.
func (c *Chain) Intervals() *Intervals { return c.intervals }

// observe notes a valid signal of device (typ as the chain resolved it, "" when it names none) at seen.
// A nil Intervals observes nothing.
func (s *Intervals) observe(device, typ string, seen time.Time) {
	if s == nil || !Sampled(device) {
		return
	}
	s.mu.Lock()
	s.note(deviceKey(device), typ, seen.UnixNano())
	s.mu.Unlock()
}

// note records the interval of the device with key, if it is followed, and follows it otherwise when
// its slot and its type's share have room.
func (s *Intervals) note(key uint64, typ string, at int64) {
	if s.slots == nil {
		s.slots = make([]followed, 1<<adviceSlotBits)
	}
	f := &s.slots[(key*0x9E3779B97F4A7C15)>>(64-adviceSlotBits)]
	if f.key == key {
		t := f.typ
		if typ != "" {
			t = s.typeIndex(typ)
		}
		if t != f.typ { // the device changed type: it moves to the new type's share, if there is room
			s.types[f.typ-1].devices--
			if t == 0 || s.types[t-1].devices >= adviceMaxDevices {
				*f = followed{}
				return
			}
			s.types[t-1].devices++
			f.typ = t
		}
		gap := time.Duration(at - f.last)
		if gap <= 0 {
			return
		}
		f.last = at
		if gap < adviceForget {
			s.types[t-1].add(gap)
		}
		return
	}
	if f.key != 0 {
		if time.Duration(at-f.last) < adviceForget {
			return // held by a device still signalling
		}
		s.types[f.typ-1].devices--
		*f = followed{}
	}
	if typ == "" {
		typ = deadline.DefaultType
	}
	t := s.typeIndex(typ)
	if t == 0 || s.types[t-1].devices >= adviceMaxDevices {
		return
	}
	s.types[t-1].devices++
	*f = followed{key: key, last: at, typ: t}
}

// typeIndex is name's position in s.types + 1, adding it while there is room; 0 when there is none.
func (s *Intervals) typeIndex(name string) uint16 {
	if t, ok := s.index[name]; ok {
		return t
	}
	if len(s.types) >= deadline.MaxTypes {
		return 0
	}
	name = strings.Clone(name) // never keep the payload it may point into
	s.types = append(s.types, &typeIntervals{name: name})
	t := uint16(len(s.types))
	s.index[name] = t
	return t
}

func (ti *typeIntervals) add(gap time.Duration) {
	if len(ti.ring) < adviceMaxIntervals {
		if ti.ring == nil {
			ti.ring = make([]time.Duration, 0, adviceMaxIntervals)
		}
		ti.ring = append(ti.ring, gap)
		return
	}
	ti.ring[ti.next] = gap
	ti.next = (ti.next + 1) % adviceMaxIntervals
}

// deviceKey is the device id's hash, never 0 (the free slot's key).
func deviceKey(device string) uint64 { return max(idhash.Of(device), 1) }

// TimeoutAdvice is GET /v1/stats?advice=true: one replica's sample.
type TimeoutAdvice struct {
	Replica string                `json:"replica"`
	Types   map[string]TypeAdvice `json:"types"`
}

// TypeAdvice is one type's observed intervals beside its timeout. P50 and P99 are absent without
// intervals, SuggestedTimeout with fewer than adviceMinSamples.
type TypeAdvice struct {
	Timeout          Duration `json:"timeout"`
	Devices          int      `json:"devices"`
	Samples          int      `json:"samples"`
	P50              Duration `json:"p50,omitempty"`
	P99              Duration `json:"p99,omitempty"`
	SuggestedTimeout Duration `json:"suggested_timeout,omitempty"`
}

// Duration is written as a short Go duration ("2m", "31.2s", "200ms") that config and
// time.ParseDuration read back.
type Duration time.Duration

// MarshalText writes d to the millisecond below a minute and to the second above.
func (d Duration) MarshalText() ([]byte, error) {
	v := time.Duration(d)
	if v < time.Minute {
		v = v.Round(time.Millisecond)
	} else {
		v = v.Round(time.Second)
	}
	s := v.String()
	if strings.HasSuffix(s, "m0s") { // 2m0s → 2m, 1h0m0s → 1h0m
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") { // 1h0m → 1h
		s = s[:len(s)-2]
	}
	return []byte(s), nil
}

// Advise reports every type of pol (default first) with its timeout and what this replica observed.
func (s *Intervals) Advise(replica string, pol *config.Policies) TimeoutAdvice {
	names := pol.Names()
	out := TimeoutAdvice{Replica: replica, Types: make(map[string]TypeAdvice, len(names))}
	for _, name := range names {
		p, _ := pol.Lookup(name)
		devices, ring := s.snapshot(name)
		a := TypeAdvice{Timeout: Duration(p.Timeout), Devices: devices, Samples: len(ring)}
		if len(ring) > 0 {
			slices.Sort(ring)
			a.P50, a.P99 = Duration(percentile(ring, 50)), Duration(percentile(ring, 99))
			if len(ring) >= adviceMinSamples {
				a.SuggestedTimeout = Duration(suggestTimeout(time.Duration(a.P99)))
			}
		}
		out.Types[name] = a
	}
	return out
}

// snapshot copies a type's intervals, so sorting them holds up no signal.
func (s *Intervals) snapshot(name string) (devices int, ring []time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.index[name]
	if !ok {
		return 0, nil
	}
	ti := s.types[t-1]
	return ti.devices, slices.Clone(ti.ring)
}

// percentile is the nearest-rank p-th percentile of sorted (not empty).
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (len(sorted)*p + 99) / 100
	return sorted[max(rank, 1)-1]
}

// suggestTimeout is three times p99, rounded up to a value an operator writes: whole seconds below a
// minute, tens of seconds below ten minutes, whole minutes above; at least a second.
func suggestTimeout(p99 time.Duration) time.Duration {
	d := 3 * p99
	unit := time.Minute
	switch {
	case d < time.Minute:
		unit = time.Second
	case d < 10*time.Minute:
		unit = 10 * time.Second
	}
	return max((d+unit-1)/unit*unit, time.Second)
}
