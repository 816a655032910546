package holdback

import (
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Share is a part of the signals that one replica alone reads while it lives: its part of an MQTT shared
// subscription, its partitions of a Kafka consumer group. Replicas advertise their shares with their
// alive mark. When one stops without handing its shares over (SIGKILL, a frozen VM, a lost network), the
// signals they carried go unread, so every other replica holds detection back from its last word until
// each of its shares is read again (a window of causeMember).
type Share struct {
	// Name says how the signals are split ("mqtt:$share/<group>/<filter>", "kafka:<group id>"): replicas
	// advertising the same name read Signals between them.
	Name string
	// Signals is what is split ("mqtt:<filter>", "kafka:<topics>"). A live replica that reads the same
	// signals under another name (another Kafka group, another shared group) reads all of them, so a
	// dead member's share of them is not lost.
	Signals string
	// Member is this replica's identity within the share: its MQTT client id, its Kafka group member tag.
	// A live replica advertising the same member took the share over (an MQTT client id is one session).
	Member string
	// Release bounds how long a dead member's share stays unread once someone else reads that share:
	// the broker ends a dead MQTT session after 1.5 keep-alives, a Kafka coordinator expels a dead member
	// after its session timeout and rebalances.
	Release time.Duration
	// Kept: the broker keeps what a dead member did not read (Kafka), so once the share is read past the
	// member's last word nothing is lost and its window needs no grace.
	Kept bool
	// TakenOver, when set, reports whether this replica has seen member's share handed to the living and
	// read past since (MQTT: the dead session taken over and ended; Kafka: the group rebalanced without
	// the member and caught up). Called on the hold-back's tick, so it must not block.
	TakenOver func(member string, since time.Time) bool
}

// deadMember is a replica incarnation that stopped while it read shares; its window is
// memberWindowID(replica, incarnation), from its last word until each share is read again.
type deadMember struct {
	replica, incarnation string
	last                 time.Time
	shares               []Share
	settled              bool // its shares are read again: not reopened while its entry lingers
}

func memberWindowID(replica, incarnation string) string {
	return "member/" + replica + "/" + incarnation
}

// followMembersLocked notices the replicas carrying shares that stopped answering (last word older than
// MemberLapse) or came back as another process (incarnation changed), holds detection back from their
// last word, and closes each such window once every share of it is read again. peers are the other
// replicas' entries that advertise shares.
func (h *Tracker) followMembersLocked(now time.Time, peers map[string]entry) {
	lapse := h.opts.MemberLapse
	before := h.peers
	h.peers = peers
	for replica, p := range peers {
		if prev, ok := before[replica]; ok && prev.incarnation != p.incarnation {
			h.memberDiedLocked(now, replica, prev, "restarted")
		}
		id := memberWindowID(replica, p.incarnation)
		switch m, known := h.members[id]; {
		case now.Sub(p.at) > lapse:
			h.memberDiedLocked(now, replica, p, "stopped answering")
		case known && !m.settled:
			// It answered again: a pause, not a death. What it missed in the pause is its own stall window.
			delete(h.members, id)
			h.local = slices.DeleteFunc(h.local, func(w Window) bool { return w.ID == id })
			h.log.Info("replica answers again: its share was not lost", zap.String("replica", replica))
		case known:
			// It answered again after its share was read by the living (a long pause): its next silence is a
			// death of its own, not this one remembered. Its settled window runs out its grace.
			delete(h.members, id)
		}
	}
	for id, m := range h.members {
		if !m.settled && h.sharesReadAgainLocked(now, m, peers) {
			m.settled = true
			h.closeLocked(id, now)
			h.log.Info("the share of a dead replica is read again", zap.String("replica", m.replica),
				zap.Duration("held", now.Sub(m.last)))
		}
		// Forgotten once its window is over and the replica's entry no longer names that incarnation.
		if m.settled && h.find(id) < 0 {
			if p, ok := peers[m.replica]; !ok || p.incarnation != m.incarnation {
				delete(h.members, id)
			}
		}
	}
}

// memberDiedLocked opens the window of a replica incarnation that stopped while carrying shares, once;
// shares whose signals another live replica reads in full are not lost and hold nothing.
func (h *Tracker) memberDiedLocked(now time.Time, replica string, e entry, why string) {
	id := memberWindowID(replica, e.incarnation)
	if _, ok := h.members[id]; ok {
		return
	}
	m := &deadMember{replica: replica, incarnation: e.incarnation, last: e.at}
	for _, s := range e.shares {
		if !h.readInFullLocked(now, s) {
			m.shares = append(m.shares, s)
		}
	}
	h.members[id] = m
	if len(m.shares) == 0 {
		m.settled = true // nothing lost: remembered only so that it is not looked at again
		return
	}
	names := make([]string, len(m.shares))
	for i, s := range m.shares {
		names[i] = s.Name
	}
	// Kafka keeps what a dead member did not read, and the share counts as read again once the group read
	// past the member's last word: nothing is lost then. An MQTT share's undelivered messages may be.
	kept := !slices.ContainsFunc(m.shares, func(s Share) bool { return !s.Kept })
	h.openLocked(now, id, causeMember, ScopeAll, e.at, "replica "+replica+" "+why+" while reading "+strings.Join(names, ", ")+
		" alone; held until its share is read again", kept)
}

// readInFullLocked reports whether a live replica reads s.Signals under a split other than s.Name.
func (h *Tracker) readInFullLocked(now time.Time, s Share) bool {
	other := func(x Share) bool { return x.Signals == s.Signals && x.Name != s.Name }
	if slices.ContainsFunc(h.opts.Shares, other) {
		return true
	}
	for _, p := range h.peers {
		if now.Sub(p.at) <= h.opts.MemberLapse && slices.ContainsFunc(p.shares, other) {
			return true
		}
	}
	return false
}

// sharesReadAgainLocked reports whether every share of m is read by the living again.
func (h *Tracker) sharesReadAgainLocked(now time.Time, m *deadMember, peers map[string]entry) bool {
	for _, s := range m.shares {
		if !h.shareReadAgainLocked(now, m, s, peers) {
			return false
		}
	}
	return true
}

func (h *Tracker) shareReadAgainLocked(now time.Time, m *deadMember, s Share, peers map[string]entry) bool {
	read := false // some live replica reads this share
	for _, own := range h.opts.Shares {
		if own.Name != s.Name {
			continue
		}
		read = true
		if own.Member == s.Member || (own.TakenOver != nil && own.TakenOver(s.Member, m.last)) {
			return true
		}
	}
	for _, p := range peers {
		if now.Sub(p.at) > h.opts.MemberLapse {
			continue
		}
		for _, ps := range p.shares {
			if ps.Name == s.Name {
				read = true
				if ps.Member == s.Member {
					return true // taken over: the same MQTT client id, connected again
				}
			}
		}
	}
	// Nobody reads it at all: the hold lasts until someone does, at most MaxHoldBack.
	return read && !now.Before(m.last.Add(s.Release))
}

// memberFloorLocked is the latest deadline the replicas carrying shares vouch for: each one's last word
// plus MemberLapse. Past it, a replica may have died with signals unread before a tick can tell; once one
// has, its window takes over. A zero time means no bound.
func (h *Tracker) memberFloorLocked(now time.Time) time.Time {
	var floor time.Time
	for replica, p := range h.peers {
		if _, dead := h.members[memberWindowID(replica, p.incarnation)]; dead {
			continue
		}
		for _, s := range p.shares {
			if !h.readInFullLocked(now, s) {
				floor = earliestSet(floor, p.at.Add(h.opts.MemberLapse))
				break
			}
		}
	}
	return floor
}
