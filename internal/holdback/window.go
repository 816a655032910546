package holdback

import (
	"encoding/json"
	"time"
)

// Cause says why heartbeatd could not trust the absence of signals during a window.
type Cause string

// The causes this version records.
const (
	CauseIngest Cause = "ingest" // a source of this replica disconnected, unsubscribed, lagging or rebalancing
	causeStall  Cause = "stall"  // heartbeatd itself paused: process stop, GC, VM freeze, clock jump
	causeDown   Cause = "down"   // heartbeatd was not running at all
	causeRedis  Cause = "redis"  // Redis refused this replica's writes, so no signal was stored
	// causeMember: a replica that alone read a share of the signals (its part of an MQTT shared
	// subscription, its partitions of a Kafka consumer group) stopped without handing it over.
	causeMember Cause = "member"
)

// Scope is which devices a window blinds.
//
// Only ScopeAll exists: every window holds back every slot, because the scanner has one watermark for
// all of them. A Kafka partition does not map to slots: a record's key need not be its device id (a
// gateway's key, or none with the id in the payload), and an MQTT shared subscription's share has no
// partition at all; docs/scaling.md says what holding everything costs.
type Scope string

// ScopeAll blinds every device.
const ScopeAll Scope = "all"

// Window is a span in which heartbeatd may have missed signals: a deadline that passed after its start
// proves nothing about the device until the window has closed and the device had a full timeout of
// visible time after it (graceFor): a device that signalled unseen inside the window signals again
// within its own timeout of the window's end. So a 30 s gateway is watched again 30 s after a window
// that holds a 2 h meter for two hours.
type Window struct {
	// ID names the window among its replica's windows ("ingest/mqtt", "stall"); reopening an ID keeps
	// the window's start and its Opened, so a flapping cause counts as one hold.
	ID      string `json:"id"`
	Replica string `json:"replica"`
	Cause   Cause  `json:"cause"`
	Scope   Scope  `json:"scope"`
	// From is where the blindness began: deadlines after it are not claimed while the window holds.
	From time.Time `json:"from"`
	// To is where it ended; zero while it lasts.
	To time.Time `json:"to,omitzero"`
	// Opened is when the window was recorded. detection.max_hold_back counts from here rather than from
	// From, so an outage noticed only at start-up (heartbeatd was down for hours) still gets its grace.
	Opened time.Time `json:"opened"`
	// Grace caps the grace of every device (graceFor): detection.grace_after_outage, else the longest
	// timeout of any type; 0 for a window in which nothing was lost (Kept).
	Grace time.Duration `json:"-"`
	// Kept: the source kept every signal sent during the window (Kafka: lag, rebalance, a dead member's
	// partitions) and the window closed once they were read past its end, so it needs no grace.
	Kept   bool   `json:"kept,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// graceFor is how long after the window's end a device whose timeout is timeout stays held: its own
// timeout, capped by Grace.
func (w Window) graceFor(timeout time.Duration) time.Duration { return min(timeout, w.Grace) }

// until is when the window stops holding every device if nothing else happens: To + Grace; zero while
// it is open.
func (w Window) until() time.Time {
	if w.To.IsZero() {
		return time.Time{}
	}
	return w.To.Add(w.Grace)
}

// untilFor is until for the devices whose timeout is timeout.
func (w Window) untilFor(timeout time.Duration) time.Time {
	if w.To.IsZero() {
		return time.Time{}
	}
	return w.To.Add(w.graceFor(timeout))
}

// live reports whether the window is open or in some device's grace at now.
func (w Window) live(now time.Time) bool {
	return w.To.IsZero() || now.Before(w.To.Add(w.Grace))
}

// blinds reports whether the devices whose timeout is timeout may have signalled unseen in the window,
// at now: it is open or they are in their grace, max_hold_back aside.
func (w Window) blinds(now time.Time, timeout time.Duration) bool {
	return w.To.IsZero() || now.Before(w.untilFor(timeout))
}

// holdsFor reports whether the window holds back the devices whose timeout is timeout at now: it blinds
// them and is not past maxHold.
func (w Window) holdsFor(now time.Time, timeout, maxHold time.Duration) bool {
	return w.blinds(now, timeout) && !w.expired(now, maxHold)
}

// expired reports whether the window has held longer than maxHold at now (maxHold ≤ 0: never).
func (w Window) expired(now time.Time, maxHold time.Duration) bool {
	return maxHold > 0 && !now.Before(w.Opened.Add(maxHold))
}

// holds reports whether the window holds detection back at now: live and not past maxHold. A live
// window past maxHold no longer holds; detection runs degraded while it lasts.
func (w Window) holds(now time.Time, maxHold time.Duration) bool {
	return w.live(now) && !w.expired(now, maxHold)
}

// watermark is the scanner's rule for the devices whose timeout is timeout: at now, claim only deadlines
// no window that holds them can explain, that is up to the earliest start of such a window, or up to now
// when none holds them.
//
// A window whose grace for these devices had not run out when a holding window began is one blindness
// with it: the devices it held have had no full timeout of visible time since it closed, so its start
// bounds them too (a broker restarted, then Redis down within a timeout of it). Such chains are followed
// back to their first window.
func watermark(now time.Time, windows []Window, timeout, maxHold time.Duration) time.Time {
	wm := now
	for _, w := range windows {
		if w.holdsFor(now, timeout, maxHold) && w.From.Before(wm) {
			wm = w.From
		}
	}
	for chained := wm.Before(now); chained; {
		chained = false
		for _, w := range windows {
			if w.From.Before(wm) && !w.To.IsZero() && w.untilFor(timeout).After(wm) && !w.expired(now, maxHold) {
				wm, chained = w.From, true
			}
		}
	}
	return wm
}

// MarshalJSON adds the grace and the end of the hold (until) for /v1/stats and /readyz.
func (w Window) MarshalJSON() ([]byte, error) {
	type plain Window
	return json.Marshal(struct {
		plain
		Grace string    `json:"grace"`
		Until time.Time `json:"until,omitzero"`
	}{plain(w), w.Grace.String(), w.until()})
}

// TypeHold is how the windows hold the devices of one type (Status.ByType).
type TypeHold struct {
	// Grace is how long after a window's end its devices stay held: their timeout, capped by the
	// window's grace (the longest of the windows that hold them).
	Grace time.Duration
	// Since: deadlines of the type later than this are not claimed.
	Since time.Time
	// Until is when the hold of the type ends if nothing else happens; zero while a window is open.
	Until time.Time
}

// MarshalJSON writes the grace as a duration string, like Window's.
func (t TypeHold) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Grace string    `json:"grace"`
		Since time.Time `json:"since"`
		Until time.Time `json:"until,omitzero"`
	}{t.Grace.String(), t.Since, t.Until})
}

// sharedWindows is one replica's entry in the Windows hash: its windows as of At, all times on the shared
// clock (Unix ms), so every replica reads them alike whatever its own clock says, the shares it reads
// alone with the incarnation of the process that reads them (member.go), and the broker client ids it
// holds alone (duplicate.go).
type sharedWindows struct {
	At          int64          `json:"at"`
	Incarnation string         `json:"incarnation,omitempty"`
	ClientIDs   []string       `json:"client_ids,omitempty"`
	Shares      []sharedShare  `json:"shares,omitempty"`
	Windows     []sharedWindow `json:"windows"`
}

type sharedShare struct {
	Name    string `json:"name"`
	Signals string `json:"signals"`
	Member  string `json:"member"`
	Release int64  `json:"release_ms"`
	Kept    bool   `json:"kept,omitempty"`
}

type sharedWindow struct {
	ID     string `json:"id"`
	Cause  Cause  `json:"cause"`
	Scope  Scope  `json:"scope"`
	From   int64  `json:"from"`
	To     int64  `json:"to,omitempty"`
	Opened int64  `json:"opened"`
	Grace  int64  `json:"grace_ms"`
	Kept   bool   `json:"kept,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// entry is one replica's entry as read back.
type entry struct {
	at          time.Time
	incarnation string
	clientIDs   []string
	shares      []Share // without TakenOver, which stays with the replica that reads the share
	windows     []Window
}

func encodeEntry(at time.Time, incarnation string, clientIDs []string, shares []Share, windows []Window) string {
	s := sharedWindows{At: at.UnixMilli(), Incarnation: incarnation, ClientIDs: clientIDs, Windows: make([]sharedWindow, len(windows))}
	for _, sh := range shares {
		s.Shares = append(s.Shares, sharedShare{Name: sh.Name, Signals: sh.Signals, Member: sh.Member, Release: sh.Release.Milliseconds(),
			Kept: sh.Kept})
	}
	for i, w := range windows {
		s.Windows[i] = sharedWindow{ID: w.ID, Cause: w.Cause, Scope: w.Scope, From: w.From.UnixMilli(), To: ms(w.To),
			Opened: w.Opened.UnixMilli(), Grace: w.Grace.Milliseconds(), Kept: w.Kept, Reason: w.Reason}
	}
	b, _ := json.Marshal(s) // plain strings and numbers always encode
	return string(b)
}

// decodeEntry reads a replica's entry; ok is false for anything else (a corrupt or foreign value).
func decodeEntry(replica, v string) (e entry, ok bool) {
	var s sharedWindows
	if err := json.Unmarshal([]byte(v), &s); err != nil || s.At <= 0 {
		return entry{}, false
	}
	e = entry{at: time.UnixMilli(s.At), incarnation: s.Incarnation, clientIDs: s.ClientIDs, windows: make([]Window, 0, len(s.Windows))}
	for _, sh := range s.Shares {
		e.shares = append(e.shares, Share{Name: sh.Name, Signals: sh.Signals, Member: sh.Member,
			Release: time.Duration(sh.Release) * time.Millisecond, Kept: sh.Kept})
	}
	for _, w := range s.Windows {
		scope := w.Scope
		if scope == "" {
			scope = ScopeAll
		}
		e.windows = append(e.windows, Window{ID: w.ID, Replica: replica, Cause: w.Cause, Scope: scope, From: fromMs(w.From),
			To: fromMs(w.To), Opened: fromMs(w.Opened), Grace: time.Duration(w.Grace) * time.Millisecond, Kept: w.Kept, Reason: w.Reason})
	}
	return e, true
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMs(x int64) time.Time {
	if x == 0 {
		return time.Time{}
	}
	return time.UnixMilli(x)
}
