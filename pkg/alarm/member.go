package alarm

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
// each of its shares is read again (a window of CauseMember).
type Share struct {
	// Name says which signals the share splits ("mqtt:<shared group>", "kafka:<group id>"): replicas that
	// advertise the same name read the same signals between them.
	Name string
	// Member is this replica's identity within the share: its MQTT client id, its Kafka group member tag.
	// A live replica advertising the same member took the share over (an MQTT client id is one session).
	Member string
	// Release bounds how long a dead member's share stays unread once someone else reads that share:
	// the broker ends a dead MQTT session after 1.5 keep-alives, a Kafka coordinator expels a dead member
	// after its session timeout and rebalances.
	Release time.Duration
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
func (h *HoldBack) followMembersLocked(now time.Time, peers map[string]entry) {
	lapse := h.opts.MemberLapse
	for replica, p := range peers {
		if prev, ok := h.peers[replica]; ok && prev.incarnation != p.incarnation {
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
		}
	}
	h.peers = peers
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

// memberDiedLocked opens the window of a replica incarnation that stopped while carrying shares, once.
func (h *HoldBack) memberDiedLocked(now time.Time, replica string, e entry, why string) {
	if len(e.shares) == 0 {
		return
	}
	id := memberWindowID(replica, e.incarnation)
	if _, ok := h.members[id]; ok {
		return
	}
	h.members[id] = &deadMember{replica: replica, incarnation: e.incarnation, last: e.at, shares: e.shares}
	names := make([]string, len(e.shares))
	for i, s := range e.shares {
		names[i] = s.Name
	}
	h.openLocked(now, id, CauseMember, ScopeAll, e.at, "replica "+replica+" "+why+" while reading "+strings.Join(names, ", ")+
		" alone; held until its share is read again")
}

// sharesReadAgainLocked reports whether every share of m is read by the living again.
func (h *HoldBack) sharesReadAgainLocked(now time.Time, m *deadMember, peers map[string]entry) bool {
	for _, s := range m.shares {
		if !h.shareReadAgainLocked(now, m, s, peers) {
			return false
		}
	}
	return true
}

func (h *HoldBack) shareReadAgainLocked(now time.Time, m *deadMember, s Share, peers map[string]entry) bool {
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
func (h *HoldBack) memberFloorLocked() time.Time {
	var floor time.Time
	for replica, p := range h.peers {
		if _, dead := h.members[memberWindowID(replica, p.incarnation)]; !dead {
			floor = earliestSet(floor, p.at.Add(h.opts.MemberLapse))
		}
	}
	return floor
}
