package holdback

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// legacyOutage is this replica's holding windows in the 0.1.0 form (updated:start:end:grace:reason, Unix
// ms), for replicas of that version during a rolling upgrade: the earliest start, and the latest end of
// the hold (zero while a window is open).
func legacyOutage(now time.Time, local []Window, maxHold time.Duration) string {
	var start, end time.Time
	open := false
	var reasons []string
	for _, w := range local {
		if !w.holds(now, maxHold) {
			continue
		}
		start = earliestSet(start, w.From)
		open = open || w.To.IsZero()
		end = maxTime(end, w.until())
		reasons = append(reasons, w.Reason)
	}
	if open {
		end = time.Time{}
	}
	return fmt.Sprintf("%d:%d:%d:0:%s", now.UnixMilli(), ms(start), ms(end), strings.Join(reasons, "; "))
}

// outage is a 0.1.0 replica's view: start zero = none; end zero = ongoing.
type outage struct {
	start, end time.Time
	grace      time.Duration
	reason     string
}

func parseOutage(v string) (updated time.Time, o outage, ok bool) {
	f := strings.SplitN(v, ":", 5)
	if len(f) != 5 {
		return time.Time{}, outage{}, false
	}
	var n [4]int64
	for i := range n {
		x, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return time.Time{}, outage{}, false
		}
		n[i] = x
	}
	return time.UnixMilli(n[0]), outage{start: fromMs(n[1]), end: fromMs(n[2]), grace: time.Duration(n[3]) * time.Millisecond, reason: f[4]}, true
}
