package history

import (
	"strconv"
	"strings"
)

// The per-day figures: for each UTC day, grouping and device with incidents, the device's downtime
// that day, the incidents it opened that day and, for a device still down, since when. They are whole
// values computed from the device's incidents, never increments, so writing them again (an event
// recorded twice, a replica retrying) changes nothing. GET /v1/availability adds them up (groups.go).

const dayMs = int64(24 * 60 * 60 * 1000)

func dayOf(ms int64) int64 { return ms / dayMs }

// dayFigure is one device's figures of one day.
type dayFigure struct {
	Down      int64 // ms of downtime of closed incidents within the day
	Incidents int64 // incidents opened that day
	OpenSince int64 // a still-open incident's downtime start (ms), counted up to the reader's now; 0: none
}

func (f dayFigure) String() string {
	return strconv.FormatInt(f.Down, 10) + " " + strconv.FormatInt(f.Incidents, 10) + " " + strconv.FormatInt(f.OpenSince, 10)
}

func parseDayFigure(s string) (dayFigure, bool) {
	parts := strings.Fields(s)
	if len(parts) != 3 {
		return dayFigure{}, false
	}
	var v [3]int64
	for i, p := range parts {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 0 {
			return dayFigure{}, false
		}
		v[i] = n
	}
	return dayFigure{Down: v[0], Incidents: v[1], OpenSince: v[2]}, true
}

// dayFigures are h's figures for the days from the day of from on, by day. An open incident's
// downtime is marked on the day it began (or from's day, when it began before), not spread: it still
// grows. A device has figures on a few days, so a slice searched in order is cheaper than a map.
func dayFigures(h *deviceHistory, from int64) dayList {
	var out dayList
	first := dayOf(from)
	for i := range h.Incidents {
		in := &h.Incidents[i]
		if d := dayOf(in.Opened); d >= first {
			out.at(d).Incidents++
		}
		if in.DownFrom == 0 {
			continue
		}
		if in.Open() {
			out.at(max(dayOf(in.DownFrom), first)).OpenSince = in.DownFrom
			continue
		}
		for d := max(dayOf(in.DownFrom), first); d <= dayOf(in.Closed); d++ {
			if down := overlap(in, d*dayMs, (d+1)*dayMs); down > 0 {
				out.at(d).Down += down
			}
		}
	}
	return out
}

// dayList is a device's figures by day.
type dayList []dayEntry

type dayEntry struct {
	day int64
	dayFigure
}

// at is the figure of day d, added when missing.
func (l *dayList) at(d int64) *dayFigure {
	for i := range *l {
		if (*l)[i].day == d {
			return &(*l)[i].dayFigure
		}
	}
	*l = append(*l, dayEntry{day: d})
	return &(*l)[len(*l)-1].dayFigure
}

// get is the figure of day d, and whether there is one.
func (l dayList) get(d int64) (dayFigure, bool) {
	for _, e := range l {
		if e.day == d {
			return e.dayFigure, true
		}
	}
	return dayFigure{}, false
}

// groupField is a day hash's field of device under group value.
func groupField(value, device string) string { return value + "\x00" + device }

func splitGroupField(field string) (value, device string, ok bool) {
	return strings.Cut(field, "\x00")
}
